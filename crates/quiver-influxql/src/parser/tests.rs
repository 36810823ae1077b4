//! Parser tests: every statement kind, precedence, literals, InfluxDB 1.x's error messages
//! (many cases ported from influxql's parser_test.go), limits, and property tests (no panic
//! on any input; `Display` parses back to the same tree).

use super::*;
use crate::ast::*;

fn parse_all(text: &str) -> Vec<Statement> {
    parse(text, ParseLimits::default()).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn one(text: &str) -> Statement {
    let mut statements = parse_all(text);
    assert_eq!(statements.len(), 1, "{text:?}");
    statements.remove(0)
}

fn select(text: &str) -> SelectStatement {
    match one(text) {
        Statement::Select(s) => *s,
        other => panic!("{text:?} is not a SELECT: {other:?}"),
    }
}

/// The `WHERE` condition of `SELECT * FROM m WHERE <text>`.
fn cond(text: &str) -> Expr {
    select(&format!("SELECT * FROM m WHERE {text}"))
        .condition
        .expect("condition")
}

/// The first field of `SELECT <text> FROM m`.
fn field(text: &str) -> Expr {
    select(&format!("SELECT {text} FROM m"))
        .fields
        .remove(0)
        .expr
}

fn err(text: &str) -> String {
    match parse(text, ParseLimits::default()) {
        Ok(statements) => panic!("{text:?} parsed: {statements:?}"),
        Err(e) => e.to_string(),
    }
}

/// Parses, renders, parses again: same tree.
fn round_trip(text: &str) {
    let first = parse_all(text);
    for statement in &first {
        let rendered = statement.to_string();
        let again = parse(&rendered, ParseLimits::default())
            .unwrap_or_else(|e| panic!("{text:?} rendered as {rendered:?}: {e}"));
        assert_eq!(
            again,
            vec![statement.clone()],
            "{text:?} rendered as {rendered:?}"
        );
    }
}

fn var(name: &str) -> Expr {
    Expr::VarRef {
        name: name.into(),
        data_type: None,
    }
}

fn typed(name: &str, t: VarType) -> Expr {
    Expr::VarRef {
        name: name.into(),
        data_type: Some(t),
    }
}

fn int(n: i64) -> Expr {
    Expr::Literal(Literal::Integer(n))
}

fn float(x: f64) -> Expr {
    Expr::Literal(Literal::Float(x))
}

fn string(s: &str) -> Expr {
    Expr::Literal(Literal::String(s.into()))
}

fn dur(ns: i64) -> Expr {
    Expr::Literal(Literal::Duration(ns))
}

fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Call {
        name: name.into(),
        args,
    }
}

fn bin(op: BinaryOp, lhs: Expr, rhs: Expr) -> Expr {
    Expr::Binary {
        op,
        lhs: Box::new(lhs),
        rhs: Box::new(rhs),
    }
}

fn paren(e: Expr) -> Expr {
    Expr::Paren(Box::new(e))
}

fn name(n: &str) -> MeasurementName {
    MeasurementName {
        database: None,
        retention_policy: None,
        name: NameOrRegex::Name(n.into()),
    }
}

fn source(n: &str) -> Source {
    Source::Measurement(name(n))
}

const S: i64 = 1_000_000_000;
const M: i64 = 60 * S;
const H: i64 = 60 * M;

// ---- SELECT ----

#[test]
fn select_star() {
    let s = select("SELECT * FROM myseries");
    assert_eq!(
        s,
        SelectStatement {
            fields: vec![Field {
                expr: Expr::Wildcard { kind: None },
                alias: None
            }],
            from: vec![source("myseries")],
            condition: None,
            group_by: vec![],
            fill: None,
            order_desc: false,
            limit: None,
            offset: None,
            slimit: None,
            soffset: None,
            timezone: None,
        }
    );
}

#[test]
fn select_fields_and_aliases() {
    let s = select(r#"SELECT "foo.bar.baz" AS foo, field1, mean(x) AS "the mean" FROM m"#);
    assert_eq!(s.fields.len(), 3);
    assert_eq!(s.fields[0].expr, var("foo.bar.baz"));
    assert_eq!(s.fields[0].alias.as_deref(), Some("foo"));
    assert_eq!(
        s.fields[1],
        Field {
            expr: var("field1"),
            alias: None
        }
    );
    assert_eq!(s.fields[2].alias.as_deref(), Some("the mean"));
}

#[test]
fn keywords_are_case_insensitive() {
    assert_eq!(
        select("select my_field from myseries where a = 1 group by host limit 1"),
        select("SELECT my_field FROM myseries WHERE a = 1 GROUP BY host LIMIT 1")
    );
}

#[test]
fn quoted_identifiers_unescape() {
    let s = select(r#"SELECT "a \"quoted\" \\ field" FROM "my measurement""#);
    assert_eq!(s.fields[0].expr, var(r#"a "quoted" \ field"#));
    assert_eq!(s.from, vec![source("my measurement")]);
}

#[test]
fn string_literal_as_field() {
    assert_eq!(field("'my_field'"), string("my_field"));
}

#[test]
fn regex_field_and_source_with_escaped_slash() {
    // from parser_test.go
    let s = select(r"SELECT /foo\/*bar/ FROM /foo\/*bar*/ WHERE x = 1");
    assert_eq!(s.fields[0].expr, Expr::Regex("foo/*bar".into()));
    assert_eq!(
        s.from,
        vec![Source::Measurement(MeasurementName {
            database: None,
            retention_policy: None,
            name: NameOrRegex::Regex("foo/*bar*".into())
        })]
    );
}

#[test]
fn typed_wildcards() {
    let s = select("SELECT *::field, *::tag, * FROM m");
    let kinds: Vec<_> = s.fields.into_iter().map(|f| f.expr).collect();
    assert_eq!(
        kinds,
        vec![
            Expr::Wildcard {
                kind: Some(WildcardKind::Field)
            },
            Expr::Wildcard {
                kind: Some(WildcardKind::Tag)
            },
            Expr::Wildcard { kind: None },
        ]
    );
}

#[test]
fn casts() {
    // from parser_test.go
    let s = select(
        "SELECT field1::float, field2::integer, field6::unsigned, field3::string, field4::boolean, field5::field, tag1::tag FROM cpu",
    );
    let exprs: Vec<_> = s.fields.into_iter().map(|f| f.expr).collect();
    assert_eq!(
        exprs,
        vec![
            typed("field1", VarType::Float),
            typed("field2", VarType::Integer),
            typed("field6", VarType::Unsigned),
            typed("field3", VarType::String),
            typed("field4", VarType::Boolean),
            typed("field5", VarType::Field),
            typed("tag1", VarType::Tag),
        ]
    );
    assert!(err("SELECT x::bogus FROM m").starts_with(
        "found bogus, expected float, integer, unsigned, string, boolean, field, tag"
    ));
}

#[test]
fn call_names_are_lower_cased() {
    assert_eq!(field("MEAN(x)"), call("mean", vec![var("x")]));
    assert_eq!(field(r#""Max"(x)"#), call("max", vec![var("x")]));
}

#[test]
fn nested_calls_and_arithmetic_on_calls() {
    assert_eq!(
        field("derivative(mean(value), 1h)"),
        call("derivative", vec![call("mean", vec![var("value")]), dur(H)])
    );
    assert_eq!(
        field("derivative(field1, 1h) / derivative(field2, 1h)"),
        bin(
            BinaryOp::Div,
            call("derivative", vec![var("field1"), dur(H)]),
            call("derivative", vec![var("field2"), dur(H)])
        )
    );
    assert_eq!(
        field("top(field1, tag1, 2)").to_string(),
        r#"top("field1", "tag1", 2)"#
    );
}

#[test]
fn distinct_forms() {
    let d = call("distinct", vec![var("f")]);
    assert_eq!(field("distinct(f)"), d);
    assert_eq!(field("DISTINCT f"), d);
    assert_eq!(field("count(distinct f)"), call("count", vec![d.clone()]));
    assert_eq!(field("count(distinct(f))"), call("count", vec![d]));
}

#[test]
fn calls_with_regex_and_no_arguments() {
    assert_eq!(
        field("count(/usage_.*/)"),
        call("count", vec![Expr::Regex("usage_.*".into())])
    );
    assert_eq!(
        cond("time > now()"),
        bin(BinaryOp::Gt, var("time"), call("now", vec![]))
    );
}

#[test]
fn qualified_measurements() {
    let from = |text: &str| select(&format!("SELECT * FROM {text}")).from;
    let m = |db: Option<&str>, rp: Option<&str>, n: NameOrRegex| {
        Source::Measurement(MeasurementName {
            database: db.map(String::from),
            retention_policy: rp.map(String::from),
            name: n,
        })
    };
    let cpu = || NameOrRegex::Name("cpu".into());
    let re = || NameOrRegex::Regex("cpu.*".into());
    assert_eq!(from("db.rp.cpu"), vec![m(Some("db"), Some("rp"), cpu())]);
    assert_eq!(from("db..cpu"), vec![m(Some("db"), None, cpu())]);
    assert_eq!(from("rp.cpu"), vec![m(None, Some("rp"), cpu())]);
    assert_eq!(
        from(r#""db"."rp"./cpu.*/"#),
        vec![m(Some("db"), Some("rp"), re())]
    );
    assert_eq!(from(r#""db"../cpu.*/"#), vec![m(Some("db"), None, re())]);
    assert_eq!(from(r#""rp"./cpu.*/"#), vec![m(None, Some("rp"), re())]);
    assert_eq!(from("cpu, mem"), vec![source("cpu"), source("mem")]);
    assert!(err("SELECT * FROM a.b.c.d").starts_with("too many segments"));
}

#[test]
fn subqueries() {
    // from parser_test.go
    let s = select(
        "SELECT sum(derivative) FROM (SELECT derivative(mean(value)) FROM cpu GROUP BY host) WHERE time >= now() - 1d GROUP BY time(1h)",
    );
    let Source::Subquery(inner) = &s.from[0] else {
        panic!("not a subquery: {:?}", s.from)
    };
    assert_eq!(inner.group_by, vec![Dimension::Tag("host".into())]);
    assert_eq!(
        s.group_by,
        vec![Dimension::Time {
            interval: H,
            offset: None
        }]
    );
    assert!(err("SELECT * FROM (SHOW DATABASES)").starts_with("found SHOW, expected SELECT"));
    assert!(err("SELECT * FROM (SELECT * FROM cpu").starts_with("found EOF, expected )"));
}

#[test]
fn where_with_time_range() {
    assert_eq!(
        cond("time > now() - 120s AND host='a'"),
        bin(
            BinaryOp::And,
            bin(
                BinaryOp::Gt,
                var("time"),
                bin(BinaryOp::Sub, call("now", vec![]), dur(120 * S))
            ),
            bin(BinaryOp::Eq, var("host"), string("a"))
        )
    );
    assert_eq!(
        cond("time >= '2024-01-01T00:00:00Z'"),
        bin(BinaryOp::GtEq, var("time"), string("2024-01-01T00:00:00Z"))
    );
}

#[test]
fn group_by_time_with_offsets() {
    let g = |text: &str| select(&format!("SELECT mean(v) FROM m GROUP BY {text}")).group_by;
    assert_eq!(
        g("time(10m, -5m)"),
        vec![Dimension::Time {
            interval: 10 * M,
            offset: Some(-5 * M)
        }]
    );
    assert_eq!(
        g("time(1h,15m)"),
        vec![Dimension::Time {
            interval: H,
            offset: Some(15 * M)
        }]
    );
}

#[test]
fn group_by_tags_regex_and_wildcard() {
    let g = |text: &str| select(&format!("SELECT v FROM m GROUP BY {text}")).group_by;
    assert_eq!(
        g(r#"host, "region", /dc.*/"#),
        vec![
            Dimension::Tag("host".into()),
            Dimension::Tag("region".into()),
            Dimension::Regex("dc.*".into())
        ]
    );
    assert_eq!(g("*"), vec![Dimension::Wildcard]);
    assert_eq!(
        g("time(1m), host::tag"),
        vec![
            Dimension::Time {
                interval: M,
                offset: None
            },
            Dimension::Tag("host".into())
        ]
    );
}

#[test]
fn fill_options() {
    let f = |text: &str| select(&format!("SELECT mean(v) FROM m GROUP BY time(1m) {text}")).fill;
    assert_eq!(f("fill(null)"), Some(Fill::Null));
    assert_eq!(f("fill(none)"), Some(Fill::None));
    assert_eq!(f("FILL(previous)"), Some(Fill::Previous));
    assert_eq!(f("fill(linear)"), Some(Fill::Linear));
    assert_eq!(f("fill(0)"), Some(Fill::Value(Literal::Integer(0))));
    assert_eq!(f("fill(-1)"), Some(Fill::Value(Literal::Integer(-1))));
    assert_eq!(f("fill(1.5)"), Some(Fill::Value(Literal::Float(1.5))));
    assert_eq!(f(""), None);
}

#[test]
fn fill_errors() {
    assert_eq!(
        err("SELECT mean(value) FROM cpu FILL + value"),
        "fill must be a function call at line 1, char 29"
    );
    assert!(err("SELECT mean(v) FROM m fill()")
        .starts_with("fill requires an argument, e.g.: 0, null, none, previous, linear"));
    assert!(
        err("SELECT mean(v) FROM m fill('x')").starts_with("expected number argument in fill()")
    );
    assert!(
        err("SELECT mean(v) FROM m fill(bogus)").starts_with("expected number argument in fill()")
    );
}

#[test]
fn order_by_time() {
    let o = |text: &str| select(&format!("SELECT v FROM m {text}")).order_desc;
    assert!(o("ORDER BY time DESC"));
    assert!(o("ORDER BY DESC"));
    assert!(!o("ORDER BY time ASC"));
    assert!(!o("ORDER BY time"));
    assert!(!o("ORDER BY ASC"));
    assert!(!o(""));
    assert!(err("SELECT v FROM m ORDER BY host")
        .starts_with("only ORDER BY time supported at this time"));
    assert!(err("SELECT field1 FROM myseries ORDER BY time, field1")
        .starts_with("only ORDER BY time supported at this time"));
}

#[test]
fn limits_offsets_and_series_limits() {
    let s = select("SELECT v FROM m LIMIT 10 OFFSET 20 SLIMIT 3 SOFFSET 4");
    assert_eq!(
        (s.limit, s.offset, s.slimit, s.soffset),
        (Some(10), Some(20), Some(3), Some(4))
    );
    let s = select("SELECT field1 FROM myseries SLIMIT 10 SOFFSET 5");
    assert_eq!((s.limit, s.slimit, s.soffset), (None, Some(10), Some(5)));
    assert_eq!(
        select("SELECT v FROM m LIMIT 18446744073709551615").limit,
        Some(u64::MAX)
    );
    assert!(err("SELECT v FROM m LIMIT 18446744073709551616")
        .starts_with("LIMIT 18446744073709551616 is out of range"));
}

#[test]
fn timezone_clause() {
    let s = select(
        "SELECT mean(value) FROM cpu WHERE time >= now() - 7d GROUP BY time(1d) TZ('America/Los_Angeles')",
    );
    assert_eq!(s.timezone.as_deref(), Some("America/Los_Angeles"));
    assert!(err("SELECT v FROM m tz(1)").starts_with("expected string argument in tz()"));
    assert!(err("SELECT v FROM m tz('a', 'b')").starts_with("tz requires exactly one argument"));
}

#[test]
fn every_clause_in_order() {
    let text = "SELECT mean(usage) AS u FROM db.rp.cpu WHERE host =~ /^web/ AND time > now() - 1h \
                GROUP BY time(5m), host fill(previous) ORDER BY time DESC LIMIT 5 OFFSET 1 SLIMIT 2 SOFFSET 3 tz('UTC')";
    let s = select(text);
    assert_eq!(s.fields[0].alias.as_deref(), Some("u"));
    assert_eq!(s.group_by.len(), 2);
    assert_eq!(s.fill, Some(Fill::Previous));
    assert!(s.order_desc);
    assert_eq!(s.timezone.as_deref(), Some("UTC"));
    assert_eq!(
        one(text).to_string(),
        r#"SELECT mean("usage") AS "u" FROM "db"."rp"."cpu" WHERE "host" =~ /^web/ AND "time" > now() - 1h GROUP BY time(5m), "host" fill(previous) ORDER BY time DESC LIMIT 5 OFFSET 1 SLIMIT 2 SOFFSET 3 tz('UTC')"#
    );
}

#[test]
fn several_statements() {
    let statements = parse_all("SELECT a FROM m; SHOW DATABASES;");
    assert_eq!(statements.len(), 2);
    assert_eq!(statements[1], Statement::ShowDatabases);
    assert_eq!(parse_all(";;SHOW DATABASES;;").len(), 1);
    assert_eq!(
        err("SELECT a FROM m SELECT b FROM m"),
        "found SELECT, expected ; at line 1, char 17"
    );
}

#[test]
fn comments_anywhere() {
    let s = select("SELECT /* the field */ a -- trailing\nFROM m /* done */");
    assert_eq!(s.fields[0].expr, var("a"));
    assert_eq!(s.from, vec![source("m")]);
}

// ---- expressions ----

#[test]
fn multiplication_binds_tighter_than_addition() {
    assert_eq!(
        cond("a + b * c = 1"),
        bin(
            BinaryOp::Eq,
            bin(
                BinaryOp::Add,
                var("a"),
                bin(BinaryOp::Mul, var("b"), var("c"))
            ),
            int(1)
        )
    );
}

#[test]
fn and_binds_tighter_than_or() {
    assert_eq!(
        cond("a = 1 OR b = 2 AND c = 3"),
        bin(
            BinaryOp::Or,
            bin(BinaryOp::Eq, var("a"), int(1)),
            bin(
                BinaryOp::And,
                bin(BinaryOp::Eq, var("b"), int(2)),
                bin(BinaryOp::Eq, var("c"), int(3))
            )
        )
    );
}

#[test]
fn operators_of_equal_precedence_associate_left() {
    assert_eq!(
        field("a - b - c"),
        bin(
            BinaryOp::Sub,
            bin(BinaryOp::Sub, var("a"), var("b")),
            var("c")
        )
    );
    assert_eq!(
        field("a / b * c"),
        bin(
            BinaryOp::Mul,
            bin(BinaryOp::Div, var("a"), var("b")),
            var("c")
        )
    );
}

#[test]
fn parentheses_are_kept() {
    assert_eq!(
        field("(a + b) * c"),
        bin(
            BinaryOp::Mul,
            paren(bin(BinaryOp::Add, var("a"), var("b"))),
            var("c")
        )
    );
}

#[test]
fn bitwise_precedence() {
    // | and ^ bind like +, & like *
    assert_eq!(
        field("a | b & c"),
        bin(
            BinaryOp::BitOr,
            var("a"),
            bin(BinaryOp::BitAnd, var("b"), var("c"))
        )
    );
    assert_eq!(
        field("a ^ b % c"),
        bin(
            BinaryOp::BitXor,
            var("a"),
            bin(BinaryOp::Mod, var("b"), var("c"))
        )
    );
}

#[test]
fn comparison_operators() {
    for (text, op) in [
        ("=", BinaryOp::Eq),
        ("!=", BinaryOp::NotEq),
        ("<>", BinaryOp::NotEq),
        ("<", BinaryOp::Lt),
        ("<=", BinaryOp::LtEq),
        (">", BinaryOp::Gt),
        (">=", BinaryOp::GtEq),
    ] {
        assert_eq!(
            cond(&format!("load {text} 100")),
            bin(op, var("load"), int(100))
        );
    }
}

#[test]
fn regex_operators() {
    assert_eq!(
        cond("region =~ /.*west.*/ AND host !~ /^a/"),
        bin(
            BinaryOp::And,
            bin(
                BinaryOp::EqRegex,
                var("region"),
                Expr::Regex(".*west.*".into())
            ),
            bin(BinaryOp::NotEqRegex, var("host"), Expr::Regex("^a".into()))
        )
    );
}

#[test]
fn unary_minus_folds_into_literals() {
    assert_eq!(field("-1"), int(-1));
    assert_eq!(field("- 1"), int(-1));
    assert_eq!(field("+1"), int(1));
    assert_eq!(field("-100.0"), float(-100.0));
    assert_eq!(field("-.23"), float(-0.23));
    assert_eq!(field("-1s"), dur(-S));
    assert_eq!(field("-9223372036854775808"), int(i64::MIN));
    assert!(err("SELECT -9223372036854775809 FROM m")
        .starts_with("constant -9223372036854775809 underflows int64"));
}

#[test]
fn unary_minus_on_references_multiplies() {
    assert_eq!(field("-value"), bin(BinaryOp::Mul, int(-1), var("value")));
    assert_eq!(field("+value"), bin(BinaryOp::Mul, int(1), var("value")));
    assert_eq!(
        field("-mean(v)"),
        bin(BinaryOp::Mul, int(-1), call("mean", vec![var("v")]))
    );
    assert_eq!(
        field("a * -b"),
        bin(
            BinaryOp::Mul,
            var("a"),
            bin(BinaryOp::Mul, int(-1), var("b"))
        )
    );
    assert_eq!(field("a * -b").to_string(), r#""a" * -"b""#);
    assert_eq!(
        err("SELECT -+1 FROM m"),
        "found +, expected identifier, number, duration, ( at line 1, char 9"
    );
}

#[test]
fn integers_unsigned_and_floats() {
    assert_eq!(field("100"), int(100));
    assert_eq!(field("9223372036854775807"), int(i64::MAX));
    assert_eq!(
        field("9223372036854775808"),
        Expr::Literal(Literal::Unsigned(9_223_372_036_854_775_808))
    );
    assert_eq!(
        field("18446744073709551615"),
        Expr::Literal(Literal::Unsigned(u64::MAX))
    );
    assert_eq!(field("100.0"), float(100.0));
    assert_eq!(field("100."), float(100.0));
    assert_eq!(field(".5"), float(0.5));
    assert_eq!(field("1.0").to_string(), "1.0");
}

#[test]
fn integer_overflow_is_an_error() {
    let big = format!("SELECT 1{} FROM myseries", "0".repeat(300));
    assert_eq!(err(&big), "unable to parse integer at line 1, char 8");
    assert_eq!(
        err("SELECT 18446744073709551616 FROM m"),
        "unable to parse integer at line 1, char 8"
    );
    let huge_float = format!("SELECT 1{}.0 FROM m", "0".repeat(400));
    assert_eq!(err(&huge_float), "unable to parse number at line 1, char 8");
}

#[test]
fn booleans() {
    assert_eq!(
        cond("b = true"),
        bin(
            BinaryOp::Eq,
            var("b"),
            Expr::Literal(Literal::Boolean(true))
        )
    );
    assert_eq!(
        cond("b = FALSE"),
        bin(
            BinaryOp::Eq,
            var("b"),
            Expr::Literal(Literal::Boolean(false))
        )
    );
}

#[test]
fn duration_units() {
    for (text, ns) in [
        ("10ns", 10),
        ("5u", 5_000),
        ("5µ", 5_000),
        ("10ms", 10_000_000),
        ("1s", S),
        ("1m", M),
        ("1h", H),
        ("1d", 24 * H),
        ("1w", 7 * 24 * H),
        ("1h30m", 90 * M),
        ("1m30s500ms", 90 * S + 500_000_000),
    ] {
        assert_eq!(field(text), dur(ns), "{text}");
    }
    assert_eq!(field("90m").to_string(), "90m");
    assert_eq!(field("120m").to_string(), "2h");
}

#[test]
fn bad_durations() {
    assert_eq!(
        err("SELECT 10x FROM m"),
        "invalid duration 10x at line 1, char 8"
    );
    assert_eq!(
        err("SELECT 10n FROM m"),
        "invalid duration 10n at line 1, char 8"
    );
    assert_eq!(
        err("SELECT 15251w FROM m"),
        "overflowed duration 15251w: choose a smaller duration at line 1, char 8"
    );
    assert!(err("SELECT 99999999999999999999s FROM m").starts_with("overflowed duration"));
    // from parser_test.go: a float is not a duration
    assert_eq!(
        err("SELECT 10.5h FROM myseries"),
        "found h, expected FROM at line 1, char 12"
    );
}

#[test]
fn string_escapes() {
    assert_eq!(
        cond(r"s = 'it\'s \\ \n'"),
        bin(BinaryOp::Eq, var("s"), string("it's \\ \n"))
    );
}

#[test]
fn time_is_a_reference_and_now_a_call() {
    assert_eq!(field("time"), var("time"));
    assert_eq!(field("now()"), call("now", vec![]));
}

#[test]
fn dotted_references_keep_their_dots() {
    assert_eq!(field("a.b.c"), var("a.b.c"));
    assert_eq!(field("a..c"), var("a..c"));
    assert!(err("SELECT a.b.c.d FROM m").starts_with("too many segments"));
}

#[test]
fn keywords_are_not_identifiers_unless_quoted() {
    assert_eq!(
        err("SELECT key FROM m"),
        "found KEY, expected identifier, string, number, bool at line 1, char 8"
    );
    assert_eq!(field(r#""key""#), var("key"));
}

// ---- SHOW ----

#[test]
fn show_databases_and_retention_policies() {
    assert_eq!(one("SHOW DATABASES"), Statement::ShowDatabases);
    assert_eq!(
        one("SHOW RETENTION POLICIES"),
        Statement::ShowRetentionPolicies { database: None }
    );
    assert_eq!(
        one("show retention policies on db0"),
        Statement::ShowRetentionPolicies {
            database: Some("db0".into())
        }
    );
}

#[test]
fn show_measurements() {
    assert_eq!(
        one("SHOW MEASUREMENTS"),
        Statement::ShowMeasurements {
            database: None,
            with_measurement: None,
            condition: None,
            limit: None,
            offset: None
        }
    );
    assert_eq!(
        one("SHOW MEASUREMENTS ON db0 WITH MEASUREMENT = cpu WHERE region = 'uswest' LIMIT 10 OFFSET 2"),
        Statement::ShowMeasurements {
            database: Some("db0".into()),
            with_measurement: Some(MeasurementMatch::Eq("cpu".into())),
            condition: Some(bin(BinaryOp::Eq, var("region"), string("uswest"))),
            limit: Some(10),
            offset: Some(2)
        }
    );
    let Statement::ShowMeasurements {
        with_measurement, ..
    } = one("SHOW MEASUREMENTS WITH MEASUREMENT =~ /[cg]pu/")
    else {
        panic!()
    };
    assert_eq!(
        with_measurement,
        Some(MeasurementMatch::Regex("[cg]pu".into()))
    );
    assert!(err("SHOW MEASUREMENTS ON *").starts_with("SHOW MEASUREMENTS ON * is not supported"));
    assert!(err("SHOW MEASUREMENTS ON db0.rp0").contains("is not supported"));
    assert_eq!(
        err("SHOW MEASUREMENTS WITH MEASUREMENT > cpu"),
        "found >, expected =, =~ at line 1, char 36"
    );
}

#[test]
fn show_tag_keys() {
    assert_eq!(
        one("SHOW TAG KEYS ON db0 FROM src, /[cg]pu/ WHERE region = 'uswest' LIMIT 4 OFFSET 3"),
        Statement::ShowTagKeys {
            database: Some("db0".into()),
            from: vec![
                name("src"),
                MeasurementName {
                    database: None,
                    retention_policy: None,
                    name: NameOrRegex::Regex("[cg]pu".into())
                }
            ],
            condition: Some(bin(BinaryOp::Eq, var("region"), string("uswest"))),
            limit: Some(4),
            offset: Some(3)
        }
    );
    assert_eq!(
        one("SHOW TAG KEYS"),
        Statement::ShowTagKeys {
            database: None,
            from: vec![],
            condition: None,
            limit: None,
            offset: None
        }
    );
}

#[test]
fn show_tag_values_key_forms() {
    let key = |text: &str| match one(&format!("SHOW TAG VALUES FROM cpu WITH KEY {text}")) {
        Statement::ShowTagValues { key, .. } => key,
        other => panic!("{other:?}"),
    };
    assert_eq!(key("= host"), TagKeyMatch::Eq("host".into()));
    assert_eq!(key(r#"= "host""#), TagKeyMatch::Eq("host".into()));
    assert_eq!(key("!= host"), TagKeyMatch::NotEq("host".into()));
    assert_eq!(
        key("IN (region,service,host)"),
        TagKeyMatch::In(vec!["region".into(), "service".into(), "host".into()])
    );
    assert_eq!(
        key("=~ /(host|region)/"),
        TagKeyMatch::Regex("(host|region)".into())
    );
    assert_eq!(key("!~ /^_/"), TagKeyMatch::NotRegex("^_".into()));
}

#[test]
fn show_tag_values_full() {
    assert_eq!(
        one(
            r#"SHOW TAG VALUES ON db0 FROM cpu WITH KEY IN (region, host)WHERE region = 'uswest' LIMIT 1 OFFSET 2"#
        ),
        Statement::ShowTagValues {
            database: Some("db0".into()),
            from: vec![name("cpu")],
            key: TagKeyMatch::In(vec!["region".into(), "host".into()]),
            condition: Some(bin(BinaryOp::Eq, var("region"), string("uswest"))),
            limit: Some(1),
            offset: Some(2)
        }
    );
    assert_eq!(
        err("SHOW TAG VALUES FROM cpu"),
        "found EOF, expected WITH at line 1, char 26"
    );
    assert_eq!(
        err("SHOW TAG VALUES WITH KEY host"),
        "found host, expected IN, =, =~ at line 1, char 26"
    );
    assert_eq!(
        err("SHOW TAG VALUES WITH KEY =~ host"),
        "found host, expected regex at line 1, char 29"
    );
}

#[test]
fn show_field_keys_and_series() {
    assert_eq!(
        one("SHOW FIELD KEYS ON db0 FROM cpu LIMIT 1"),
        Statement::ShowFieldKeys {
            database: Some("db0".into()),
            from: vec![name("cpu")],
            limit: Some(1),
            offset: None
        }
    );
    assert_eq!(
        one("SHOW SERIES ON db0 FROM cpu WHERE host = 'a' LIMIT 2 OFFSET 0"),
        Statement::ShowSeries {
            database: Some("db0".into()),
            from: vec![name("cpu")],
            condition: Some(bin(BinaryOp::Eq, var("host"), string("a"))),
            limit: Some(2),
            offset: Some(0)
        }
    );
}

#[test]
fn show_cardinality_and_admin_forms_are_refused() {
    for (text, what) in [
        ("SHOW SERIES CARDINALITY", "SHOW SERIES CARDINALITY"),
        (
            "SHOW SERIES EXACT CARDINALITY ON db0",
            "SHOW SERIES CARDINALITY",
        ),
        (
            "SHOW MEASUREMENT CARDINALITY",
            "SHOW MEASUREMENT CARDINALITY",
        ),
        (
            "SHOW MEASUREMENT EXACT CARDINALITY",
            "SHOW MEASUREMENT CARDINALITY",
        ),
        ("SHOW TAG KEY CARDINALITY", "SHOW TAG KEY CARDINALITY"),
        (
            "SHOW TAG VALUES CARDINALITY WITH KEY = host",
            "SHOW TAG VALUES CARDINALITY",
        ),
        ("SHOW FIELD KEY CARDINALITY", "SHOW FIELD KEY CARDINALITY"),
        ("SHOW USERS", "SHOW USERS"),
        ("SHOW CONTINUOUS QUERIES", "SHOW CONTINUOUS QUERIES"),
        ("SHOW SHARD GROUPS", "SHOW SHARD GROUPS"),
        ("SHOW QUERIES", "SHOW QUERIES"),
        ("SHOW STATS", "SHOW STATS"),
        (
            "SHOW TAG KEYS WITH KEY = host",
            "SHOW TAG KEYS ... WITH KEY",
        ),
    ] {
        let message = err(text);
        assert!(
            message.starts_with(&format!("{what} is not supported")),
            "{text}: {message}"
        );
        assert!(message.ends_with("at line 1, char 1"), "{text}: {message}");
    }
}

#[test]
fn show_unknown_lists_what_1x_expects() {
    assert_eq!(
        err("SHOW FOO"),
        "found FOO, expected CONTINUOUS, DATABASES, DIAGNOSTICS, FIELD, GRANTS, MEASUREMENT, MEASUREMENTS, QUERIES, RETENTION, SERIES, SHARD, SHARDS, STATS, SUBSCRIPTIONS, TAG, USERS at line 1, char 6"
    );
    assert_eq!(
        err("SHOW RETENTION"),
        "found EOF, expected POLICIES at line 1, char 16"
    );
    assert_eq!(
        err("SHOW RETENTION ON"),
        "found ON, expected POLICIES at line 1, char 16"
    );
    assert_eq!(
        err("SHOW RETENTION POLICIES ON"),
        "found EOF, expected identifier at line 1, char 28"
    );
    assert_eq!(
        err("SHOW TAG"),
        "found EOF, expected KEY, KEYS, VALUES at line 1, char 10"
    );
}

// ---- statements Quiver does not run ----

#[test]
fn writes_and_administration_are_refused() {
    for (text, what) in [
        ("CREATE DATABASE foo", "CREATE DATABASE"),
        ("DROP MEASUREMENT cpu", "DROP MEASUREMENT"),
        ("DELETE FROM cpu WHERE time < now()", "DELETE"),
        ("EXPLAIN SELECT * FROM cpu", "EXPLAIN"),
        ("GRANT ALL TO bob", "GRANT ALL"),
        ("REVOKE READ ON db FROM bob", "REVOKE READ"),
        (
            "ALTER RETENTION POLICY rp ON db DURATION 1d",
            "ALTER RETENTION",
        ),
        ("SET PASSWORD FOR bob = 'x'", "SET PASSWORD"),
        ("KILL QUERY 1", "KILL QUERY"),
    ] {
        assert_eq!(
            err(text),
            format!(
                "{what} is not supported: Quiver runs InfluxQL SELECT and SHOW queries at line 1, char 1"
            )
        );
    }
}

#[test]
fn select_into_is_refused() {
    assert!(
        err("SELECT mean(v) INTO db.rp.m FROM cpu").starts_with("SELECT ... INTO is not supported")
    );
}

// ---- error messages and positions (parser_test.go) ----

#[test]
fn empty_and_unknown_statements() {
    let expected =
        "expected SELECT, DELETE, SHOW, CREATE, DROP, EXPLAIN, GRANT, REVOKE, ALTER, SET, KILL";
    assert_eq!(err(""), format!("found EOF, {expected} at line 1, char 1"));
    assert_eq!(
        err("blah blah"),
        format!("found blah, {expected} at line 1, char 1")
    );
    assert_eq!(
        err("  ;  -- nothing"),
        format!("found EOF, {expected} at line 1, char 17")
    );
}

#[test]
fn select_errors_from_influxql() {
    for (text, expected) in [
        ("SELECT", "found EOF, expected identifier, string, number, bool at line 1, char 8"),
        ("SELECT field1 X", "found X, expected FROM at line 1, char 15"),
        (
            r#"SELECT field1 FROM "series" WHERE X +;"#,
            "found ;, expected identifier, string, number, bool at line 1, char 38",
        ),
        ("SELECT field1 FROM myseries GROUP", "found EOF, expected BY at line 1, char 35"),
        ("SELECT field1 FROM myseries LIMIT", "found EOF, expected integer at line 1, char 35"),
        ("SELECT field1 FROM myseries LIMIT 10.5", "found 10.5, expected integer at line 1, char 35"),
        ("SELECT field1 FROM myseries OFFSET", "found EOF, expected integer at line 1, char 36"),
        ("SELECT field1 FROM myseries OFFSET 10.5", "found 10.5, expected integer at line 1, char 36"),
        ("SELECT field1 FROM myseries ORDER", "found EOF, expected BY at line 1, char 35"),
        ("SELECT field1 FROM myseries ORDER BY", "found EOF, expected identifier, ASC, DESC at line 1, char 38"),
        ("SELECT field1 FROM myseries ORDER BY /", "found /, expected identifier, ASC, DESC at line 1, char 38"),
        ("SELECT field1 FROM myseries ORDER BY 1", "found 1, expected identifier, ASC, DESC at line 1, char 38"),
        ("SELECT field1 FROM myseries ORDER BY time ASC,", "found EOF, expected identifier at line 1, char 47"),
        ("SELECT field1 AS", "found EOF, expected identifier at line 1, char 18"),
        ("SELECT field1 FROM 12", "found 12, expected identifier at line 1, char 20"),
        ("SELECT distinct FROM myseries", "found FROM, expected identifier at line 1, char 17"),
        ("SELECT count(distinct) FROM myseries", "found ), expected (, identifier at line 1, char 22"),
        ("SELECT field1 from myseries WHERE host =~ 'asd' LIMIT 1", "found asd, expected regex at line 1, char 42"),
        (
            "SELECT value > 2 FROM cpu",
            "invalid operator > in SELECT clause; operator is intended for WHERE clause at line 1, char 8",
        ),
        (
            "SELECT value = 2 FROM cpu",
            "invalid operator = in SELECT clause; operator is intended for WHERE clause at line 1, char 8",
        ),
        (
            "SELECT s =~ /foo/ FROM cpu",
            "invalid operator =~ in SELECT clause; operator is intended for WHERE clause at line 1, char 8",
        ),
    ] {
        assert_eq!(err(text), expected, "{text}");
    }
}

#[test]
fn missing_from() {
    assert_eq!(
        err("SELECT mean(value) WHERE time > now()"),
        "found WHERE, expected FROM at line 1, char 20"
    );
    assert_eq!(
        err("SELECT FROM cpu"),
        "found FROM, expected identifier, string, number, bool at line 1, char 8"
    );
}

#[test]
fn unterminated_string_and_identifier() {
    assert_eq!(
        err("SELECT v FROM m WHERE host = 'abc"),
        "unterminated string at line 1, char 30"
    );
    assert_eq!(
        err(r#"SELECT "abc FROM m"#),
        "unterminated quoted identifier at line 1, char 8"
    );
    assert_eq!(
        err(r"SELECT v FROM m WHERE host = 'a\qb'"),
        r"bad escape: \q at line 1, char 32"
    );
}

#[test]
fn bad_regexes() {
    assert_eq!(
        err("SELECT v FROM m WHERE host =~ /abc"),
        "unterminated regex at line 1, char 31"
    );
    assert_eq!(
        err("SELECT v FROM m WHERE host =~ /ab\nc/"),
        "unterminated regex at line 1, char 31"
    );
    assert_eq!(
        err("SELECT v FROM m WHERE host =~ /(abc/"),
        "invalid regex: unclosed group at line 1, char 31"
    );
}

#[test]
fn group_by_time_mistakes() {
    let e = |dims: &str| err(&format!("SELECT mean(v) FROM m GROUP BY {dims}"));
    assert_eq!(
        e("time()"),
        "time dimension expected 1 or 2 arguments at line 1, char 32"
    );
    assert_eq!(
        e("time(1m, 2m, 3m)"),
        "time dimension expected 1 or 2 arguments at line 1, char 32"
    );
    assert_eq!(
        e("time"),
        "time() is a function and expects at least one argument at line 1, char 32"
    );
    assert_eq!(
        e("time(10)"),
        "time dimension must have duration argument at line 1, char 32"
    );
    assert_eq!(
        e("time(0s)"),
        "time dimension must have positive duration at line 1, char 32"
    );
    assert_eq!(
        e("time(1m), time(2m)"),
        "multiple time dimensions not allowed at line 1, char 42"
    );
    assert!(e("time(1h, now())").starts_with("time dimension offset now() is not supported"));
    assert!(e("time(1h, 'x')").contains("is not supported"));
    assert!(e("time(1h, host)").starts_with("time dimension offset must be duration or now()"));
    assert_eq!(
        e("mean(x)"),
        "only time() calls allowed in dimensions at line 1, char 32"
    );
    assert_eq!(
        e("1"),
        "only time and tag dimensions allowed at line 1, char 32"
    );
    assert_eq!(e("time(1m"), "found EOF, expected ) at line 1, char 39");
}

#[test]
fn negative_limit() {
    assert_eq!(
        err("SELECT v FROM m LIMIT -1"),
        "found -, expected integer at line 1, char 23"
    );
    assert_eq!(
        err("SHOW MEASUREMENTS OFFSET -1"),
        "found -, expected integer at line 1, char 26"
    );
}

#[test]
fn positions_count_lines_and_characters() {
    assert_eq!(
        err("SELECT v\nFROM m\nWHERE x = 'é' AND ?"),
        "found ?, expected identifier, string, number, bool at line 3, char 19"
    );
    assert_eq!(
        err("SELECT v\r\nFROM m LIMIT x"),
        "found x, expected integer at line 2, char 14"
    );
}

#[test]
fn strings_are_positioned_like_1x() {
    // 1.x reports a single-quoted string one character before its quote
    assert_eq!(
        err("SELECT v FROM m LIMIT 'x'"),
        "found x, expected integer at line 1, char 22"
    );
    assert_eq!(
        err("'x'"),
        "found x, expected SELECT, DELETE, SHOW, CREATE, DROP, EXPLAIN, GRANT, REVOKE, ALTER, SET, KILL at line 1, char 1"
    );
}

#[test]
fn with_measurement_takes_a_bare_name() {
    assert!(err("SHOW MEASUREMENTS WITH MEASUREMENT = db.rp.cpu")
        .starts_with("WITH MEASUREMENT takes a measurement name or regex"));
}

#[test]
fn bound_parameters_are_refused() {
    assert!(err("SELECT v FROM m WHERE host = $host")
        .starts_with("bound parameters are not supported: $host"));
}

// ---- limits ----

#[test]
fn ten_thousand_nested_parentheses_is_an_error() {
    let text = format!(
        "SELECT {}1{} FROM m",
        "(".repeat(10_000),
        ")".repeat(10_000)
    );
    let message = err(&text);
    assert!(message.contains("max_depth"), "{message}");
    assert!(message.ends_with("at line 1, char 72"), "{message}");
}

#[test]
fn depth_limit_is_exact() {
    let nested = |n: usize| format!("SELECT {}1{} FROM m", "(".repeat(n), ")".repeat(n));
    assert!(parse(&nested(64), ParseLimits::default()).is_ok());
    assert!(parse(&nested(65), ParseLimits::default()).is_err());
    let limits = ParseLimits {
        max_depth: 3,
        ..ParseLimits::default()
    };
    assert!(parse(&nested(3), limits).is_ok());
    assert!(parse(&nested(4), limits).is_err());
}

#[test]
fn nested_calls_and_subqueries_count_towards_depth() {
    let calls = |n: usize| format!("SELECT {}x{} FROM m", "f(".repeat(n), ")".repeat(n));
    assert!(parse(&calls(64), ParseLimits::default()).is_ok());
    assert!(err(&calls(65)).contains("max_depth"));
    let subqueries = |n: usize| {
        format!(
            "SELECT v FROM {}m{}",
            "(SELECT v FROM ".repeat(n),
            ")".repeat(n)
        )
    };
    assert!(parse(&subqueries(64), ParseLimits::default()).is_ok());
    assert!(err(&subqueries(65)).contains("max_depth"));
    assert!(err(&subqueries(20_000)).contains("max_depth"));
}

#[test]
fn long_operator_chains() {
    let chain = |n: usize| {
        let terms: Vec<String> = (0..n).map(|i| format!("host = 'h{i}'")).collect();
        format!("SELECT v FROM m WHERE {}", terms.join(" OR "))
    };
    // a thousand alternatives parse (and render and drop without trouble)
    round_trip(&chain(1000));
    let message = err(&chain(10_000));
    assert!(message.contains("16 × max_depth"), "{message}");
    let sum = format!("SELECT {} FROM m", vec!["1"; 100_000].join("+"));
    assert!(err(&sum).contains("max_depth"));
}

#[test]
fn size_limit() {
    let limits = ParseLimits {
        max_bytes: 10,
        ..ParseLimits::default()
    };
    let e = parse("SELECT v FROM m", limits).expect_err("too long");
    assert_eq!(
        e.to_string(),
        "query is 15 bytes, more than the limit of 10 bytes (max_bytes) at line 1, char 1"
    );
    assert!(parse(
        "SHOW TAG KEYS",
        ParseLimits {
            max_bytes: 13,
            ..limits
        }
    )
    .is_ok());
}

// ---- canonical rendering ----

#[test]
fn canonical_rendering() {
    for (text, canonical) in [
        ("select value from cpu", r#"SELECT "value" FROM "cpu""#),
        (
            "SELECT MEAN(v) FROM db..cpu WHERE t > now() - 3600s GROUP BY time(60m, 30s), * fill(0)",
            r#"SELECT mean("v") FROM "db".."cpu" WHERE "t" > now() - 1h GROUP BY time(1h, 30s), * fill(0)"#,
        ),
        ("show measurements with measurement =~ /a\\/b/", r#"SHOW MEASUREMENTS WITH MEASUREMENT =~ /a\/b/"#),
        ("SHOW FIELD KEYS FROM cpu", r#"SHOW FIELD KEYS FROM "cpu""#),
        ("SELECT 1.5 + .5 FROM m", r#"SELECT 1.5 + 0.5 FROM "m""#),
        ("SELECT -x FROM m", r#"SELECT -"x" FROM "m""#),
    ] {
        assert_eq!(one(text).to_string(), canonical, "{text}");
    }
    // SQL's doubled quote is two adjacent strings in InfluxQL: an error
    assert!(parse(
        "SHOW TAG VALUES WITH KEY IN (a) WHERE x='it''s'",
        ParseLimits::default()
    )
    .is_err());
}

#[test]
fn corpus_round_trips() {
    for text in [
        "SELECT * FROM myseries GROUP BY *",
        "SELECT field1, * FROM myseries GROUP BY *",
        r#"SELECT "foo.bar.baz" AS foo FROM foo"#,
        "SELECT sample(field1, 100) FROM myseries;",
        "SELECT moving_average(field1, 3) FROM myseries",
        "SELECT * FROM cpu WHERE host = 'serverC' AND region =~ /.*west.*/",
        r#"select percentile("field1", 2.0), field2 from cpu"#,
        "select count(distinct field3), sum(field4) from metrics",
        r#"SELECT sum(value) FROM "kbps" WHERE time > now() - 120s AND deliveryservice='steam-dns' and cachegroup = 'total' GROUP BY time(60s)"#,
        "SELECT sum(mean) FROM (SELECT mean(value) FROM cpu WHERE time >= now() - 1d GROUP BY time(1h))",
        r"SELECT /foo\/*bar/ FROM /foo\/*bar*/ WHERE x = 1",
        "SELECT mean(value) FROM cpu WHERE time >= now() - 7d GROUP BY time(1d) TZ('America/Los_Angeles')",
        "SELECT a * -b, -(a + b), +c, -1 * d, 2 * -1 * e FROM m",
        "SELECT a - -1, a - -1.5, -9223372036854775808, 9223372036854775808 FROM m",
        "SELECT (a + b) * c, a + (b * c), (a) FROM m WHERE (x = 1 OR y = 2) AND z != 3",
        "SELECT v FROM m WHERE a =~ /x/ + 1 AND b !~ /\\// OR c <> 'q'",
        "SELECT v FROM m WHERE a & 1 | 2 ^ 3 % 4 = 0",
        r#"SELECT "a\"b" FROM "db"."rp"./re/, rp.m, "x"."y"."z""#,
        "SELECT top(value, host, 3), count(/re/) FROM m GROUP BY time(1m, -30s), /dc/ fill(-2.5) ORDER BY time DESC SLIMIT 1",
        "SHOW DATABASES",
        "SHOW RETENTION POLICIES ON db0",
        "SHOW MEASUREMENTS ON db0 WITH MEASUREMENT = cpu WHERE region = 'uswest' LIMIT 10 OFFSET 1",
        "SHOW TAG KEYS ON db0 FROM src, /[cg]pu/ WHERE region = 'uswest' LIMIT 4 OFFSET 3",
        "SHOW TAG VALUES FROM cpu WITH KEY IN (region, host) WHERE region = 'uswest'",
        "SHOW TAG VALUES WITH KEY !~ /^_/",
        "SHOW FIELD KEYS ON db FROM cpu LIMIT 1 OFFSET 2",
        "SHOW SERIES FROM /[cg]pu/ WHERE region = 'x' LIMIT 2",
        "SELECT v FROM m WHERE s = 'line\\nbreak \\'q\\' back\\\\slash'",
        "SELECT \"fill\" FROM m GROUP BY \"fill\" fill(1)",
        "SELECT distinct(a, b), \"from\"(x), \"2x\"(y) FROM m",
        "SELECT v FROM m WHERE time > 0 AND time < 1700000000000000000 - 5u",
    ] {
        round_trip(text);
    }
}

// ---- properties ----

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn ident() -> BoxedStrategy<String> {
        prop_oneof![
            4 => "[a-z_][a-z0-9_]{0,6}",
            2 => "[ -~]{0,6}",
            1 => "[a-z\"'\\\\ \n.]{0,5}",
            1 => "\\PC{0,4}",
        ]
        .boxed()
    }

    fn non_empty_ident() -> BoxedStrategy<String> {
        ident().prop_filter("non-empty", |s| !s.is_empty()).boxed()
    }

    /// Patterns the lexer can produce and the regex crate accepts.
    fn pattern() -> BoxedStrategy<String> {
        prop_oneof![
            "[a-z0-9/.^$ ]{1,8}",
            Just(r"\d+".to_string()),
            Just("(cpu|mem)_[0-9]+".to_string()),
            Just(".*".to_string()),
            Just(r"a\\/b".to_string()),
        ]
        .boxed()
    }

    fn duration() -> BoxedStrategy<i64> {
        prop_oneof![
            (-1000i64..1000).prop_map(|n| n * 60_000_000_000),
            (-1000i64..1000).prop_map(|n| n * 1_000),
            any::<i64>().prop_filter("-i64::MIN has no magnitude", |n| *n != i64::MIN),
        ]
        .boxed()
    }

    fn finite() -> BoxedStrategy<f64> {
        prop_oneof![
            any::<f64>().prop_filter("finite", |x| x.is_finite()),
            (-1000i32..1000).prop_map(|n| f64::from(n) / 8.0),
        ]
        .boxed()
    }

    fn literal() -> BoxedStrategy<Literal> {
        prop_oneof![
            any::<i64>().prop_map(Literal::Integer),
            ((i64::MAX as u64 + 1)..=u64::MAX).prop_map(Literal::Unsigned),
            finite().prop_map(Literal::Float),
            any::<String>().prop_map(Literal::String),
            any::<bool>().prop_map(Literal::Boolean),
            duration().prop_map(Literal::Duration),
        ]
        .boxed()
    }

    fn var_type() -> BoxedStrategy<Option<VarType>> {
        prop_oneof![
            3 => Just(None),
            1 => prop::sample::select(vec![
                VarType::Float,
                VarType::Integer,
                VarType::Unsigned,
                VarType::String,
                VarType::Boolean,
                VarType::Field,
                VarType::Tag,
            ])
            .prop_map(Some),
        ]
        .boxed()
    }

    fn leaf() -> BoxedStrategy<Expr> {
        prop_oneof![
            3 => (ident(), var_type()).prop_map(|(name, data_type)| Expr::VarRef { name, data_type }),
            3 => literal().prop_map(Expr::Literal),
            1 => prop::sample::select(vec![None, Some(WildcardKind::Field), Some(WildcardKind::Tag)])
                .prop_map(|kind| Expr::Wildcard { kind }),
        ]
        .boxed()
    }

    const ARITHMETIC: &[BinaryOp] = &[
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Mod,
        BinaryOp::BitAnd,
        BinaryOp::BitOr,
        BinaryOp::BitXor,
    ];

    const ALL_OPS: &[BinaryOp] = &[
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Mod,
        BinaryOp::BitAnd,
        BinaryOp::BitOr,
        BinaryOp::BitXor,
        BinaryOp::Eq,
        BinaryOp::NotEq,
        BinaryOp::Lt,
        BinaryOp::LtEq,
        BinaryOp::Gt,
        BinaryOp::GtEq,
        BinaryOp::EqRegex,
        BinaryOp::NotEqRegex,
        BinaryOp::And,
        BinaryOp::Or,
    ];

    /// The precedence an operand shows its parent, if it is a binary operation written
    /// without parentheses.
    fn bare_precedence(e: &Expr) -> Option<u8> {
        match e {
            Expr::Binary { op, .. } if e.as_unary_sign().is_none() => Some(op.precedence()),
            _ => None,
        }
    }

    /// A binary node in canonical shape: operands that InfluxQL's precedence would regroup
    /// are parenthesised, as a parsed tree would have them.
    fn binary(op: BinaryOp, lhs: Expr, rhs: Expr) -> Expr {
        let p = op.precedence();
        let lhs = match bare_precedence(&lhs) {
            Some(q) if q < p => paren(lhs),
            _ => lhs,
        };
        let rhs = match bare_precedence(&rhs) {
            Some(q) if q <= p => paren(rhs),
            _ => rhs,
        };
        bin(op, lhs, rhs)
    }

    fn expr(boolean: bool) -> BoxedStrategy<Expr> {
        let ops = if boolean { ALL_OPS } else { ARITHMETIC };
        leaf()
            .prop_recursive(4, 24, 3, move |inner| {
                prop_oneof![
                    (
                        prop::sample::select(ops.to_vec()),
                        inner.clone(),
                        inner.clone(),
                        pattern()
                    )
                        .prop_map(|(op, lhs, rhs, re)| match op {
                            BinaryOp::EqRegex | BinaryOp::NotEqRegex => {
                                binary(op, lhs, Expr::Regex(re))
                            }
                            _ => binary(op, lhs, rhs),
                        }),
                    (
                        "[a-z_][a-z0-9_]{0,6}",
                        prop::collection::vec(
                            prop_oneof![
                                4 => inner.clone(),
                                1 => pattern().prop_map(Expr::Regex)
                            ],
                            0..3
                        )
                    )
                        .prop_map(|(name, args)| Expr::Call { name, args }),
                    inner.clone().prop_map(paren),
                    (prop::bool::ANY, inner.clone()).prop_map(|(negative, e)| {
                        let e = match e {
                            Expr::VarRef { .. } | Expr::Call { .. } | Expr::Paren(_) => e,
                            other => paren(other),
                        };
                        bin(BinaryOp::Mul, int(if negative { -1 } else { 1 }), e)
                    }),
                ]
            })
            .boxed()
    }

    fn measurement() -> BoxedStrategy<MeasurementName> {
        (
            prop::option::of(non_empty_ident()),
            prop::option::of(non_empty_ident()),
            prop_oneof![
                3 => ident().prop_map(NameOrRegex::Name),
                1 => pattern().prop_map(NameOrRegex::Regex),
            ],
        )
            .prop_map(|(database, retention_policy, name)| MeasurementName {
                database,
                retention_policy,
                name,
            })
            .boxed()
    }

    fn dimensions() -> BoxedStrategy<Vec<Dimension>> {
        let other = prop_oneof![
            ident()
                .prop_filter("time is not a tag", |n| !n.eq_ignore_ascii_case("time"))
                .prop_map(Dimension::Tag),
            pattern().prop_map(Dimension::Regex),
            Just(Dimension::Wildcard),
        ];
        (
            prop::option::of((1..=i64::MAX, prop::option::of(duration()))),
            prop::collection::vec(other, 0..3),
        )
            .prop_map(|(time, mut rest)| {
                if let Some((interval, offset)) = time {
                    rest.insert(0, Dimension::Time { interval, offset });
                }
                rest
            })
            .boxed()
    }

    fn fill() -> BoxedStrategy<Option<Fill>> {
        prop::option::of(prop_oneof![
            Just(Fill::Null),
            Just(Fill::None),
            Just(Fill::Previous),
            Just(Fill::Linear),
            any::<i64>().prop_map(|n| Fill::Value(Literal::Integer(n))),
            finite().prop_map(|x| Fill::Value(Literal::Float(x))),
        ])
        .boxed()
    }

    fn select_statement(depth: u32) -> BoxedStrategy<SelectStatement> {
        let field = prop_oneof![
            5 => expr(false),
            1 => pattern().prop_map(Expr::Regex),
        ];
        let fields = prop::collection::vec(
            (field, prop::option::of(ident())).prop_map(|(expr, alias)| Field { expr, alias }),
            1..3,
        );
        let source = if depth == 0 {
            measurement().prop_map(Source::Measurement).boxed()
        } else {
            prop_oneof![
                3 => measurement().prop_map(Source::Measurement),
                1 => select_statement(depth - 1).prop_map(|s| Source::Subquery(Box::new(s))),
            ]
            .boxed()
        };
        let limits = (
            prop::option::of(any::<u64>()),
            prop::option::of(any::<u64>()),
            prop::option::of(any::<u64>()),
            prop::option::of(any::<u64>()),
        );
        (
            fields,
            prop::collection::vec(source, 1..3),
            prop::option::of(expr(true)),
            dimensions(),
            fill(),
            any::<bool>(),
            limits,
            prop::option::of(any::<String>()),
        )
            .prop_map(
                |(fields, from, condition, group_by, fill, order_desc, limits, timezone)| {
                    SelectStatement {
                        fields,
                        from,
                        condition,
                        group_by,
                        fill,
                        order_desc,
                        limit: limits.0,
                        offset: limits.1,
                        slimit: limits.2,
                        soffset: limits.3,
                        timezone,
                    }
                },
            )
            .boxed()
    }

    fn statement() -> BoxedStrategy<Statement> {
        let db = || prop::option::of(ident());
        let from = || prop::collection::vec(measurement(), 0..3);
        let cond = || prop::option::of(expr(true));
        let n = || prop::option::of(any::<u64>());
        let key = prop_oneof![
            ident().prop_map(TagKeyMatch::Eq),
            ident().prop_map(TagKeyMatch::NotEq),
            prop::collection::vec(ident(), 1..4).prop_map(TagKeyMatch::In),
            pattern().prop_map(TagKeyMatch::Regex),
            pattern().prop_map(TagKeyMatch::NotRegex),
        ];
        let with_measurement = prop::option::of(prop_oneof![
            ident().prop_map(MeasurementMatch::Eq),
            pattern().prop_map(MeasurementMatch::Regex),
        ]);
        prop_oneof![
            4 => select_statement(2).prop_map(|s| Statement::Select(Box::new(s))),
            1 => Just(Statement::ShowDatabases),
            1 => db().prop_map(|database| Statement::ShowRetentionPolicies { database }),
            1 => (db(), with_measurement, cond(), n(), n()).prop_map(
                |(database, with_measurement, condition, limit, offset)| Statement::ShowMeasurements {
                    database, with_measurement, condition, limit, offset
                }),
            1 => (db(), from(), cond(), n(), n()).prop_map(
                |(database, from, condition, limit, offset)| Statement::ShowTagKeys {
                    database, from, condition, limit, offset
                }),
            1 => (db(), from(), key, cond(), n(), n()).prop_map(
                |(database, from, key, condition, limit, offset)| Statement::ShowTagValues {
                    database, from, key, condition, limit, offset
                }),
            1 => (db(), from(), n(), n()).prop_map(
                |(database, from, limit, offset)| Statement::ShowFieldKeys {
                    database, from, limit, offset
                }),
            1 => (db(), from(), cond(), n(), n()).prop_map(
                |(database, from, condition, limit, offset)| Statement::ShowSeries {
                    database, from, condition, limit, offset
                }),
        ]
        .boxed()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn display_parses_back_to_the_same_tree(stmt in statement()) {
            let text = stmt.to_string();
            let parsed = parse(&text, ParseLimits::default());
            prop_assert_eq!(parsed, Ok(vec![stmt]), "rendered as {}", text);
        }

        #[test]
        fn display_is_stable(stmt in statement()) {
            let text = stmt.to_string();
            let again = parse(&text, ParseLimits::default()).map(|s| s[0].to_string());
            prop_assert_eq!(again, Ok(text));
        }

        #[test]
        fn arbitrary_text_never_panics(text in any::<String>()) {
            let _ = parse(&text, ParseLimits::default());
        }

        #[test]
        fn influxql_like_text_never_panics(
            text in "([a-zA-Z0-9_ ().,;:*/'\"=~!<>+%&|^\\\\\n$µ-]|SELECT |FROM |WHERE |GROUP BY |SHOW |TAG |KEYS |fill|time|::){0,40}"
        ) {
            if let Ok(statements) = parse(&text, ParseLimits::default()) {
                // whatever parses, renders as text that parses back the same
                for stmt in statements {
                    let rendered = stmt.to_string();
                    prop_assert_eq!(parse(&rendered, ParseLimits::default()), Ok(vec![stmt]), "{}", rendered);
                }
            }
        }

        #[test]
        fn mutated_valid_queries_never_panic(
            stmt in statement(),
            cut in any::<prop::sample::Index>(),
            insert in "[ ()'\"/*\\\\,.;:=~-]{0,3}",
        ) {
            let text = stmt.to_string();
            let mut at = cut.index(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let mutated = format!("{}{}{}", &text[..at], insert, &text[at..]);
            if let Ok(statements) = parse(&mutated, ParseLimits::default()) {
                for stmt in statements {
                    let rendered = stmt.to_string();
                    prop_assert_eq!(parse(&rendered, ParseLimits::default()), Ok(vec![stmt]), "{}", rendered);
                }
            }
        }
    }
}
