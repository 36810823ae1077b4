//! Values bound to a statement's placeholders: positional (`$1`, `$2`) or named (`$host`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use datafusion::common::{ParamValues, ScalarValue};
use serde_json::Value;

/// Values for a statement's placeholders.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum QueryParams {
    /// The statement has no placeholders (or none are bound).
    #[default]
    None,
    /// `$1`, `$2`, ... in order.
    Positional(Vec<ScalarValue>),
    /// `$name` by name (without the `$`).
    Named(BTreeMap<String, ScalarValue>),
}

impl QueryParams {
    /// The values as DataFusion binds them; `None` if there are none.
    pub fn to_param_values(&self) -> Option<ParamValues> {
        match self {
            QueryParams::None => None,
            QueryParams::Positional(values) => Some(ParamValues::from(values.clone())),
            QueryParams::Named(values) => Some(ParamValues::from(
                values
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<Vec<_>>(),
            )),
        }
    }

    /// Values given as JSON (InfluxDB 3's `params`): an object binds `$name`s, an array `$1`,
    /// `$2`, ...; `null` binds none. Values are strings, numbers, booleans or null; the error
    /// says which placeholder's value is not.
    pub fn from_json(params: Value) -> Result<Self, String> {
        Ok(match params {
            Value::Null => QueryParams::None,
            Value::Object(values) => QueryParams::Named(
                values
                    .into_iter()
                    .map(|(name, v)| Ok((name.clone(), json_scalar(v, &format!("${name}"))?)))
                    .collect::<Result<BTreeMap<_, _>, String>>()?,
            ),
            Value::Array(values) => QueryParams::Positional(
                values
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| json_scalar(v, &format!("${}", i + 1)))
                    .collect::<Result<_, _>>()?,
            ),
            other => {
                return Err(format!(
                    "\"params\" must be a JSON object (for $name placeholders) or an array (for $1, $2, ...), not {other}"
                ))
            }
        })
    }

    /// An exact rendering of the values with their types, for cache keys: two parameter sets
    /// render alike only if they bind the same typed values to the same placeholders.
    pub fn fingerprint(&self) -> String {
        let mut out = String::new();
        match self {
            QueryParams::None => {}
            QueryParams::Positional(values) => {
                for (i, value) in values.iter().enumerate() {
                    let _ = write!(out, "${}={value:?};", i + 1);
                }
            }
            QueryParams::Named(values) => {
                for (name, value) in values {
                    let _ = write!(out, "${name:?}={value:?};");
                }
            }
        }
        out
    }
}

/// One placeholder's value from JSON.
fn json_scalar(value: Value, placeholder: &str) -> Result<ScalarValue, String> {
    Ok(match value {
        Value::Null => ScalarValue::Null,
        Value::Bool(b) => ScalarValue::Boolean(Some(b)),
        Value::String(s) => ScalarValue::Utf8(Some(s)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                ScalarValue::Int64(Some(i))
            } else if let Some(u) = n.as_u64() {
                ScalarValue::UInt64(Some(u))
            } else {
                ScalarValue::Float64(n.as_f64())
            }
        }
        Value::Array(_) | Value::Object(_) => {
            return Err(format!(
                "parameter {placeholder} must be a string, number, boolean or null"
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_tell_types_and_case_apart() {
        let named = |k: &str, v: ScalarValue| QueryParams::Named([(k.to_string(), v)].into());
        let a = named("name", ScalarValue::Utf8(Some("Bob".into())));
        let b = named("name", ScalarValue::Utf8(Some("bob".into())));
        let c = named("name", ScalarValue::Int64(Some(1)));
        let d = named("name", ScalarValue::Utf8(Some("1".into())));
        let e = QueryParams::Positional(vec![ScalarValue::Utf8(Some("Bob".into()))]);
        let all = [&a, &b, &c, &d, &e, &QueryParams::None];
        for (i, x) in all.iter().enumerate() {
            for y in &all[i + 1..] {
                assert_ne!(x.fingerprint(), y.fingerprint(), "{x:?} vs {y:?}");
            }
        }
        assert_eq!(a.fingerprint(), a.clone().fingerprint());
    }
}
