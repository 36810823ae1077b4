//! InfluxQL, InfluxDB 1.x's query language, for Quiver: this crate owns it end to end.
//!
//! The parser ([`parse`], pure and fuzzable, no engine dependencies) turns query text into
//! the syntax tree of [`ast`]; the planner alongside it turns that tree into DataFusion
//! logical plans. The tree's `Display` is canonical InfluxQL that parses back to the same
//! tree, so the rendered text of a statement is a stable cache key.
//!
//! Quiver runs the reading half of InfluxQL: `SELECT` and the schema-exploration `SHOW`
//! statements. Writes and administration (`CREATE`, `DROP`, `DELETE`, `GRANT`, ...),
//! `SELECT ... INTO` and cardinality estimates are parse errors that say they are not
//! supported.

pub mod ast;
mod lexer;
pub mod parser;
#[cfg(feature = "planner")]
pub mod plan;

pub use parser::{parse, ParseError, ParseLimits};
