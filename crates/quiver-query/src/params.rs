//! Values bound to a statement's placeholders: positional (`$1`, `$2`) or named (`$host`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use datafusion::common::{ParamValues, ScalarValue};

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
