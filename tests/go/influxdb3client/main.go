// Command influxdb3client drives Quiver with the official InfluxDB 3 Go client
// (github.com/InfluxCommunity/influxdb3-go): it writes points through the client's write API,
// then queries them over Flight on the same host and port, in SQL (with a parameter) and in
// InfluxQL, and prints what it read as JSON lines for tests/python/test_influxdb3_clients.py.
//
//	go run . -host http://127.0.0.1:8086 -token "" -database db
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/InfluxCommunity/influxdb3-go/v2/influxdb3"
)

func main() {
	host := flag.String("host", "http://127.0.0.1:8086", "the server's HTTP URL")
	token := flag.String("token", "", "the token (empty: none)")
	database := flag.String("database", "go_client", "the database")
	flag.Parse()
	if err := run(*host, *token, *database); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(host, token, database string) error {
	client, err := influxdb3.New(influxdb3.ClientConfig{Host: host, Token: token, Database: database})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	points := []*influxdb3.Point{
		influxdb3.NewPointWithMeasurement("weather").SetTag("city", "oslo").
			SetDoubleField("temp", 3.5).SetIntegerField("hum", 80).
			SetTimestamp(time.Unix(1_600_000_000, 0)),
		influxdb3.NewPointWithMeasurement("weather").SetTag("city", "rome").
			SetDoubleField("temp", 21.25).SetIntegerField("hum", 40).
			SetTimestamp(time.Unix(1_600_000_060, 0)),
	}
	if err := client.WritePoints(ctx, points); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	queries := []struct {
		name string
		run  func() (*influxdb3.QueryIterator, error)
	}{
		{"sql", func() (*influxdb3.QueryIterator, error) {
			return client.Query(ctx, "SELECT city, temp, hum FROM weather ORDER BY time")
		}},
		{"sql_params", func() (*influxdb3.QueryIterator, error) {
			return client.QueryWithParameters(ctx, "SELECT temp FROM weather WHERE city = $city",
				influxdb3.QueryParameters{"city": "rome"})
		}},
		{"influxql", func() (*influxdb3.QueryIterator, error) {
			return client.Query(ctx, "SELECT mean(temp) FROM weather GROUP BY city",
				influxdb3.WithQueryType(influxdb3.InfluxQL))
		}},
		{"missing_table", func() (*influxdb3.QueryIterator, error) {
			return client.Query(ctx, "SELECT * FROM nosuch")
		}},
	}
	out := json.NewEncoder(os.Stdout)
	for _, q := range queries {
		rows, err := collect(q.run)
		result := map[string]any{"query": q.name, "rows": rows}
		if err != nil {
			result["error"] = err.Error()
		}
		if err := out.Encode(result); err != nil {
			return err
		}
	}
	return nil
}

// collect reads every row of a query as a map with sorted keys (times as Unix nanoseconds).
func collect(run func() (*influxdb3.QueryIterator, error)) ([]map[string]any, error) {
	iterator, err := run()
	if err != nil {
		return nil, err
	}
	var rows []map[string]any
	for iterator.Next() {
		row := map[string]any{}
		keys := make([]string, 0)
		for k := range iterator.Value() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := iterator.Value()[k]
			if t, ok := v.(time.Time); ok {
				v = t.UnixNano()
			}
			row[k] = v
		}
		rows = append(rows, row)
	}
	return rows, iterator.Err()
}
