// The cells of an answer (an Arrow table read by Apache Arrow's JavaScript library, the global
// `Arrow` of vendor/arrow.min.js): each column's kind and a reader of its values as text, and
// the exact raw values of a column of any chunks. Used by the query page's table and chart.

import { timestampText, toNanos } from './time.js';

/** A result column: its name, type and a reader of its value at a row as text (or null). */
export function describeColumn(field, vector) {
  const type = field.type;
  const numeric = Arrow.DataType.isInt(type) || Arrow.DataType.isFloat(type) || Arrow.DataType.isDecimal(type);
  return {
    name: field.name,
    type: String(type),
    numeric,
    timestamp: Arrow.DataType.isTimestamp(type),
    text: Arrow.DataType.isUtf8(type) || Arrow.DataType.isLargeUtf8(type) ||
      (Arrow.DataType.isDictionary(type) && (Arrow.DataType.isUtf8(type.dictionary) || Arrow.DataType.isLargeUtf8(type.dictionary))),
    vector,
    read: cellReader(type, vector),
  };
}

function cellReader(type, vector) {
  if (Arrow.DataType.isTimestamp(type)) {
    const raw = rawValues(vector);
    return (i) => (vector.isValid(i) ? timestampText(toNanos(raw(i), type.unit)) : null);
  }
  if (Arrow.DataType.isDate(type)) {
    return (i) => {
      const v = vector.get(i);
      return v == null ? null : new Date(Number(v)).toISOString().slice(0, 10);
    };
  }
  return (i) => {
    const v = vector.get(i);
    if (v == null) return null;
    if (v instanceof Uint8Array) {
      const hex = Array.from(v.slice(0, 32), (b) => b.toString(16).padStart(2, '0')).join('');
      return `0x${hex}${v.length > 32 ? '…' : ''}`;
    }
    if (typeof v === 'object' && typeof v.toJSON === 'function') return JSON.stringify(v.toJSON(), bigintJson);
    return String(v);
  };
}

function bigintJson(_, v) {
  return typeof v === 'bigint' ? v.toString() : v;
}

/** The raw (exact, BigInt for 64-bit types) value of row `i` of a column of any chunks. */
export function rawValues(vector) {
  const chunks = vector.data;
  const starts = [];
  let start = 0;
  for (const chunk of chunks) {
    starts.push(start);
    start += chunk.length;
  }
  return (i) => {
    let lo = 0;
    let hi = chunks.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (starts[mid] <= i) lo = mid; else hi = mid - 1;
    }
    return chunks[lo].values[i - starts[lo]];
  };
}
