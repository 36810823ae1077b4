// Drives a running Quiver server with the JDBC drivers Java applications use: pgjdbc (the
// PostgreSQL wire protocol) and the Arrow Flight SQL JDBC driver. Run by
// tests/python/test_jdbc.py with Java's source launcher:
//
//   java --add-opens=java.base/java.nio=ALL-UNNAMED -cp <drivers> JdbcClients.java \
//       <pg port> <flight port> <database> all|queries <query>...
//
// For every query and both drivers it prints one JSON line with the column names and the rows
// (as a plain Statement, then as a PreparedStatement executed repeatedly: pgjdbc switches to a
// named server-side statement and binary results after five executions). With `all` it then
// prints the result of a parameterised query on table `cpu` (columns host and usage), the
// tables and `cpu`'s columns the driver's metadata lists in the database's schema (a Quiver
// database is a SQL schema: other databases' tables are listed under their own), and an error's SQLSTATE
// followed by a query on the same connection. The Python test compares them with HTTP's.

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Properties;

public class JdbcClients {
    public static void main(String[] args) throws Exception {
        String pgPort = args[0];
        String flightPort = args[1];
        String database = args[2];
        boolean all = args[3].equals("all");
        List<String> queries = List.of(args).subList(4, args.length);

        // A token allowed to read the database: its name is the PostgreSQL user (pgjdbc logs in
        // with SCRAM-SHA-256), its secret the password and the Flight SQL bearer token.
        String tokenName = System.getenv("QUIVER_TOKEN_NAME");
        String token = System.getenv("QUIVER_TOKEN");
        // With QUIVER_TLS_CA (a CA's PEM file), both drivers connect over TLS to "localhost",
        // checking the server's certificate chain and name against that CA.
        String tlsCa = System.getenv("QUIVER_TLS_CA");
        String host = tlsCa == null ? "127.0.0.1" : "localhost";
        Properties pg = new Properties();
        pg.setProperty("user", tokenName);
        pg.setProperty("password", token);
        if (tlsCa != null) {
            pg.setProperty("sslmode", "verify-full");
            pg.setProperty("sslrootcert", tlsCa);
        }
        String pgUrl = "jdbc:postgresql://" + host + ":" + pgPort + "/" + database;
        try (Connection conn = DriverManager.getConnection(pgUrl, pg)) {
            exercise("pgjdbc", conn, database, queries, all);
        }

        // Properties the driver does not know are sent as gRPC headers: `database` chooses it.
        String flightUrl = "jdbc:arrow-flight-sql://" + host + ":" + flightPort
                + "/?useEncryption=" + (tlsCa != null) + "&database=" + database;
        Properties flight = new Properties();
        flight.setProperty("token", token);
        if (tlsCa != null) {
            flight.setProperty("tlsRootCerts", tlsCa);
        }
        try (Connection conn = DriverManager.getConnection(flightUrl, flight)) {
            exercise("flight-sql-jdbc", conn, database, queries, all);
        }
    }

    static void exercise(String client, Connection conn, String database,
            List<String> queries, boolean all)
            throws SQLException {
        for (String sql : queries) {
            try (Statement statement = conn.createStatement();
                 ResultSet rs = statement.executeQuery(sql)) {
                emit(client, "statement", sql, rs);
            }
            try (PreparedStatement prepared = conn.prepareStatement(sql)) {
                String first = null;
                for (int i = 0; i < 7; i++) {
                    try (ResultSet rs = prepared.executeQuery()) {
                        String json = resultJson(rs);
                        if (first == null) {
                            first = json;
                        } else if (!first.equals(json)) {
                            throw new IllegalStateException(client + ": execution " + i
                                    + " of a prepared statement answered differently:\n" + first
                                    + "\n" + json);
                        }
                    }
                }
                System.out.println(line(client, "prepared", sql, first));
            }
        }

        if (!all) {
            return;
        }
        String parameterised = "SELECT host, usage FROM cpu WHERE usage > ? ORDER BY time";
        try (PreparedStatement prepared = conn.prepareStatement(parameterised)) {
            prepared.setDouble(1, 2.0);
            try (ResultSet rs = prepared.executeQuery()) {
                emit(client, "parameter", parameterised.replace("?", "2.0"), rs);
            }
        }

        DatabaseMetaData meta = conn.getMetaData();
        List<String> tables = new ArrayList<>();
        try (ResultSet rs = meta.getTables(null, database, "%", null)) {
            while (rs.next()) {
                tables.add(rs.getString("TABLE_NAME"));
            }
        }
        List<String> columns = new ArrayList<>();
        try (ResultSet rs = meta.getColumns(null, database, "cpu", "%")) {
            while (rs.next()) {
                columns.add(rs.getString("COLUMN_NAME"));
            }
        }
        System.out.println("{\"client\":" + quote(client) + ",\"check\":\"metadata\",\"product\":"
                + quote(meta.getDatabaseProductName()) + ",\"tables\":" + strings(tables)
                + ",\"columns\":" + strings(columns) + "}");

        String state;
        try (Statement statement = conn.createStatement()) {
            statement.executeQuery("SELECT * FROM no_such_table");
            state = "no error";
        } catch (SQLException e) {
            state = Objects.toString(e.getSQLState(), "null") + ": " + e.getMessage();
        }
        try (Statement statement = conn.createStatement();
             ResultSet rs = statement.executeQuery("SELECT count(*) AS n FROM cpu")) {
            rs.next();
            System.out.println("{\"client\":" + quote(client) + ",\"check\":\"error\",\"error\":"
                    + quote(state) + ",\"count_after\":" + rs.getLong(1) + "}");
        }
    }

    static void emit(String client, String check, String sql, ResultSet rs) throws SQLException {
        System.out.println(line(client, check, sql, resultJson(rs)));
    }

    static String line(String client, String check, String sql, String result) {
        return "{\"client\":" + quote(client) + ",\"check\":" + quote(check) + ",\"sql\":"
                + quote(sql) + "," + result + "}";
    }

    /** `"columns": [...], "rows": [[...], ...]` with every value as JSON. */
    static String resultJson(ResultSet rs) throws SQLException {
        ResultSetMetaData meta = rs.getMetaData();
        int n = meta.getColumnCount();
        List<String> names = new ArrayList<>();
        for (int i = 1; i <= n; i++) {
            names.add(meta.getColumnLabel(i));
        }
        StringBuilder rows = new StringBuilder("[");
        while (rs.next()) {
            if (rows.length() > 1) {
                rows.append(',');
            }
            rows.append('[');
            for (int i = 1; i <= n; i++) {
                if (i > 1) {
                    rows.append(',');
                }
                rows.append(value(rs, i));
            }
            rows.append(']');
        }
        rows.append(']');
        return "\"columns\":" + strings(names) + ",\"rows\":" + rows;
    }

    /**
     * A value as JSON: numbers and booleans as such, times as nanoseconds since the epoch
     * (read with getTimestamp, as applications do: the Flight SQL driver's getObject does not
     * implement TIMESTAMP WITH TIME ZONE columns).
     */
    static String value(ResultSet rs, int column) throws SQLException {
        int type = rs.getMetaData().getColumnType(column);
        if (type == Types.TIMESTAMP || type == Types.TIMESTAMP_WITH_TIMEZONE) {
            Timestamp t = rs.getTimestamp(column);
            if (t == null) {
                return "null";
            }
            java.time.Instant instant = t.toInstant();
            return Long.toString(instant.getEpochSecond() * 1_000_000_000L + instant.getNano());
        }
        Object v = rs.getObject(column);
        if (v == null) {
            return "null";
        }
        if (v instanceof Number || v instanceof Boolean) {
            return v.toString();
        }
        return quote(v.toString());
    }

    static String strings(List<String> values) {
        List<String> quoted = new ArrayList<>();
        for (String v : values) {
            quoted.add(quote(v));
        }
        return "[" + String.join(",", quoted) + "]";
    }

    static String quote(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }
}
