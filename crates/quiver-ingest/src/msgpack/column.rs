//! One column being decoded, typed by the values it receives (MessagePack says "integer" or
//! "float", not which field type a table wants): integers are `Int64`, unsigned integers above
//! `i64::MAX` make it `UInt64`, a float makes it `Float64`; booleans are their own type, and
//! strings are dictionary-encoded (`Dictionary(Int32, Utf8)`, the data model's tag type: most
//! string columns of metrics are tags, which then need no conversion, and a repeated value is
//! stored once; a string field is unpacked at the end). A promotion converts the values
//! appended so far, once, and only where nothing is lost; anything else (a string among
//! numbers, a negative number among values above `i64::MAX`, an integer a float cannot hold
//! exactly) is an error naming the value.
//!
//! The table's own schema is applied afterwards ([`super::table`]), on whole arrays.

use std::sync::Arc;

use arrow::array::{
    ArrayBuilder, ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, StringDictionaryBuilder,
    UInt64Builder,
};
use arrow::datatypes::Int32Type;

use super::reader::Scalar;

/// Distinct strings a string column makes room for up front (it grows past them as needed).
const DISTINCT_HINT: usize = 1024;

/// Largest integer magnitude a `f64` holds exactly (2^53).
pub(crate) const MAX_EXACT_FLOAT_INT: u64 = 1 << 53;

/// A column's values so far.
pub(crate) enum Column {
    /// Only nils so far (no type yet), and how many values (and, for strings, bytes) to make
    /// room for once typed.
    Nulls {
        count: usize,
        capacity: usize,
        bytes: usize,
    },
    /// Integers.
    Int(Int64Builder),
    /// Non-negative integers, some above `i64::MAX`.
    UInt(UInt64Builder),
    /// Floats (and integers a float holds exactly).
    Float(Float64Builder),
    /// Strings, dictionary-encoded.
    Str(StringDictionaryBuilder<Int32Type>),
    /// Booleans.
    Bool(BooleanBuilder),
}

impl std::fmt::Debug for Column {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} column of {} values", self.kind(), self.len())
    }
}

impl Default for Column {
    fn default() -> Self {
        Column::with_capacity(0, 0)
    }
}

impl Column {
    /// A column of `rows` nulls.
    pub(crate) fn nulls(rows: usize) -> Self {
        Column::Nulls {
            count: rows,
            capacity: 0,
            bytes: 0,
        }
    }

    /// An empty column that expects about `capacity` values and, if they are strings, at
    /// most `bytes` bytes of them (hints, not limits). Callers bound both by the bytes left
    /// in the payload, so a forged length allocates nothing the payload could not fill.
    pub(crate) fn with_capacity(capacity: usize, bytes: usize) -> Self {
        Column::Nulls {
            count: 0,
            capacity,
            bytes,
        }
    }

    /// Number of values (nulls included).
    pub(crate) fn len(&self) -> usize {
        match self {
            Column::Nulls { count, .. } => *count,
            Column::Int(b) => b.len(),
            Column::UInt(b) => b.len(),
            Column::Float(b) => b.len(),
            Column::Str(b) => b.len(),
            Column::Bool(b) => b.len(),
        }
    }

    /// The builder of a float column (for [`super::reader::Reader::float64_run`]).
    #[inline]
    pub(crate) fn floats(&mut self) -> Option<&mut Float64Builder> {
        match self {
            Column::Float(builder) => Some(builder),
            _ => None,
        }
    }

    /// Appends a null.
    pub(crate) fn push_null(&mut self) {
        match self {
            Column::Nulls { count, .. } => *count += 1,
            Column::Int(b) => b.append_null(),
            Column::UInt(b) => b.append_null(),
            Column::Float(b) => b.append_null(),
            Column::Str(b) => b.append_null(),
            Column::Bool(b) => b.append_null(),
        }
    }

    /// Appends `value`, promoting the column if it needs to; the error says what clashed.
    #[inline]
    pub(crate) fn push(&mut self, value: Scalar<'_>) -> Result<(), String> {
        match (&mut *self, value) {
            (_, Scalar::Nil) => self.push_null(),
            (Column::Int(b), Scalar::Int(v)) => b.append_value(v),
            (Column::UInt(b), Scalar::UInt(v)) => b.append_value(v),
            (Column::UInt(b), Scalar::Int(v)) => {
                b.append_value(u64::try_from(v).map_err(|_| {
                    format!("negative integer {v} in a column of integers above 2^63-1")
                })?)
            }
            (Column::Float(b), Scalar::Float(v)) => b.append_value(v),
            (Column::Float(b), Scalar::Int(v)) => {
                b.append_value(exact_float(v.unsigned_abs(), v as f64)?)
            }
            (Column::Float(b), Scalar::UInt(v)) => b.append_value(exact_float(v, v as f64)?),
            (Column::Str(b), Scalar::Str(v)) => {
                b.append(v)
                    .map_err(|_| "more than 2^31 distinct strings in one column".to_string())?;
            }
            (Column::Bool(b), Scalar::Bool(v)) => b.append_value(v),
            (
                Column::Nulls {
                    count,
                    capacity,
                    bytes,
                },
                value,
            ) => {
                *self = typed(*count, (*capacity).max(*count + 1), *bytes, value)?;
                return self.push(value);
            }
            (Column::Int(_), Scalar::UInt(_)) => {
                self.promote_to_uint()?;
                return self.push(value);
            }
            (Column::Int(_) | Column::UInt(_), Scalar::Float(_)) => {
                self.promote_to_float()?;
                return self.push(value);
            }
            (column, value) => {
                return Err(format!(
                    "{} value among {} values",
                    value.kind(),
                    column.kind()
                ))
            }
        }
        Ok(())
    }

    fn kind(&self) -> &'static str {
        match self {
            Column::Nulls { .. } => "nil",
            Column::Int(_) | Column::UInt(_) => "integer",
            Column::Float(_) => "float",
            Column::Str(_) => "string",
            Column::Bool(_) => "boolean",
        }
    }

    fn promote_to_uint(&mut self) -> Result<(), String> {
        let Column::Int(builder) = self else {
            unreachable!("only integer columns become unsigned")
        };
        let ints = builder.finish();
        let mut unsigned = UInt64Builder::with_capacity(ints.len());
        for v in ints.iter() {
            match v {
                Some(v) => unsigned.append_value(u64::try_from(v).map_err(|_| {
                    format!("integer above 2^63-1 in a column with negative integer {v}")
                })?),
                None => unsigned.append_null(),
            }
        }
        *self = Column::UInt(unsigned);
        Ok(())
    }

    fn promote_to_float(&mut self) -> Result<(), String> {
        let mut floats = Float64Builder::with_capacity(self.len());
        match self {
            Column::Int(builder) => {
                for v in builder.finish().iter() {
                    match v {
                        Some(v) => floats.append_value(exact_float(v.unsigned_abs(), v as f64)?),
                        None => floats.append_null(),
                    }
                }
            }
            Column::UInt(builder) => {
                for v in builder.finish().iter() {
                    match v {
                        Some(v) => floats.append_value(exact_float(v, v as f64)?),
                        None => floats.append_null(),
                    }
                }
            }
            _ => unreachable!("only integer columns become float"),
        }
        *self = Column::Float(floats);
        Ok(())
    }

    /// The values as an array; `None` if they were all nil (the column has no type).
    pub(crate) fn finish(self) -> Option<ArrayRef> {
        Some(match self {
            Column::Nulls { .. } => return None,
            Column::Int(mut b) => Arc::new(b.finish()),
            Column::UInt(mut b) => Arc::new(b.finish()),
            Column::Float(mut b) => Arc::new(b.finish()),
            Column::Str(mut b) => Arc::new(b.finish()),
            Column::Bool(mut b) => Arc::new(b.finish()),
        })
    }
}

/// `value` if an integer of this magnitude converts to a float exactly.
fn exact_float(magnitude: u64, value: f64) -> Result<f64, String> {
    if magnitude <= MAX_EXACT_FLOAT_INT {
        Ok(value)
    } else {
        Err(format!(
            "integer {value} among floats cannot be stored exactly as a float (beyond 2^53)"
        ))
    }
}

/// A column for the first non-nil `value`, after `nulls` nils, with room for `capacity` values
/// (and, for strings, as many bytes as `capacity` copies of `value`, at most `max_bytes`).
fn typed(
    nulls: usize,
    capacity: usize,
    max_bytes: usize,
    value: Scalar<'_>,
) -> Result<Column, String> {
    let mut column = match value {
        Scalar::Int(_) => Column::Int(Int64Builder::with_capacity(capacity)),
        Scalar::UInt(_) => Column::UInt(UInt64Builder::with_capacity(capacity)),
        Scalar::Float(_) => Column::Float(Float64Builder::with_capacity(capacity)),
        // Room for every key, and for a few distinct values (a dictionary holds each once).
        Scalar::Str(s) => Column::Str(StringDictionaryBuilder::with_capacity(
            capacity,
            capacity.min(DISTINCT_HINT),
            capacity
                .min(DISTINCT_HINT)
                .saturating_mul(s.len())
                .min(max_bytes),
        )),
        Scalar::Bool(_) => Column::Bool(BooleanBuilder::with_capacity(capacity)),
        Scalar::Timestamp(_) => {
            return Err("a timestamp value is only allowed as the time (`t` or `time`)".into())
        }
        Scalar::Nil => unreachable!("nil does not type a column"),
    };
    for _ in 0..nulls {
        column.push_null();
    }
    Ok(column)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Float64Array, UInt64Array};
    use arrow::datatypes::Int64Type;

    fn column(values: &[Scalar<'_>]) -> Result<Option<ArrayRef>, String> {
        let mut column = Column::default();
        for v in values {
            column.push(*v)?;
        }
        Ok(column.finish())
    }

    #[test]
    fn types_follow_the_values() {
        let ints = column(&[Scalar::Nil, Scalar::Int(1), Scalar::Int(-2)])
            .unwrap()
            .unwrap();
        let ints = ints.as_primitive::<Int64Type>();
        assert_eq!(
            ints.iter().collect::<Vec<_>>(),
            vec![None, Some(1), Some(-2)]
        );
        let floats = column(&[
            Scalar::Int(1),
            Scalar::Nil,
            Scalar::Float(2.5),
            Scalar::Int(3),
        ])
        .unwrap()
        .unwrap();
        let floats = floats.as_any().downcast_ref::<Float64Array>().unwrap();
        assert_eq!(
            floats.iter().collect::<Vec<_>>(),
            vec![Some(1.0), None, Some(2.5), Some(3.0)]
        );
        let big = column(&[Scalar::Int(1), Scalar::UInt(u64::MAX)])
            .unwrap()
            .unwrap();
        let big = big.as_any().downcast_ref::<UInt64Array>().unwrap();
        assert_eq!(big.values().as_ref(), &[1, u64::MAX]);
        assert!(column(&[Scalar::Nil, Scalar::Nil]).unwrap().is_none());
    }

    #[test]
    fn lossy_or_mixed_values_are_errors() {
        assert!(column(&[Scalar::Int(-1), Scalar::UInt(u64::MAX)]).is_err());
        assert!(column(&[Scalar::UInt(u64::MAX), Scalar::Int(-1)]).is_err());
        assert!(column(&[Scalar::Float(1.0), Scalar::Int(1 << 60)]).is_err());
        assert!(column(&[Scalar::Int(1 << 60), Scalar::Float(1.0)]).is_err());
        let mixed = column(&[Scalar::Str("a"), Scalar::Int(1)]).unwrap_err();
        assert!(
            mixed.contains("integer value among string values"),
            "{mixed}"
        );
        assert!(column(&[Scalar::Bool(true), Scalar::Str("a")]).is_err());
        assert!(column(&[Scalar::Timestamp(1)]).is_err());
    }
}
