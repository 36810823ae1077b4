//! Fuzzes the InfluxQL parser with arbitrary query texts: it must never panic or overflow its
//! stack (nesting is bounded by `ParseLimits`), and every statement it accepts must render
//! (`Display`, the canonical form used as a cache key) as text that parses back to the same
//! statement.
//!
//! Run from `fuzz/`: `cargo +nightly fuzz run influxql corpus/influxql seeds/influxql`
//! (new inputs go to `corpus/`, which is not committed; `seeds/` is the committed seed corpus).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_influxql::{parse, ParseLimits};

fuzz_target!(|body: &[u8]| {
    let text = String::from_utf8_lossy(body);
    let Ok(statements) = parse(&text, ParseLimits::default()) else {
        return;
    };
    for statement in statements {
        let rendered = statement.to_string();
        match parse(&rendered, ParseLimits::default()) {
            Ok(again) => assert_eq!(
                again,
                vec![statement],
                "{text:?} rendered as {rendered:?} parses differently"
            ),
            Err(e) => panic!("{text:?} rendered as {rendered:?}, which does not parse: {e}"),
        }
    }
});
