// The CSV reader of the upload page: a file's text parsed into rows of strings (RFC 4180), the
// kind a column's values fit (integer, float, boolean, text, or empty) and a time value read as
// nanoseconds since 1970. No DOM, no network.

import { NANOS_PER_UNIT } from './time.js';

/**
 * Parses CSV text (RFC 4180: quoted fields with doubled quotes and line breaks, CRLF; a
 * leading byte-order mark is dropped) into rows of strings; each row's `line` is the line of
 * the file it starts on. Blank lines are skipped.
 */
export function parseCsv(text) {
  const rows = [];
  let row = [];
  let field = '';
  let quoted = false;
  let line = 1;
  let rowLine = 1;
  const endRow = () => {
    row.push(field);
    field = '';
    if (row.length > 1 || row[0] !== '') {
      row.line = rowLine;
      rows.push(row);
    }
    row = [];
  };
  for (let i = text.charCodeAt(0) === 0xfeff ? 1 : 0; i < text.length; i++) {
    const c = text[i];
    if (c === '\n') line += 1;
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i += 1; }
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"' && field === '') quoted = true;
    else if (c === ',') { row.push(field); field = ''; }
    else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') { i += 1; line += 1; }
      else if (c === '\r') line += 1;
      endRow();
      rowLine = line;
    } else field += c;
  }
  if (quoted) throw new Error(`The CSV file ends inside a quoted field (opened on line ${rowLine} or after).`);
  endRow();
  return rows;
}

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

export function isInt64(text) {
  if (!/^[+-]?\d+$/.test(text)) return false;
  const value = BigInt(text);
  return value >= INT64_MIN && value <= INT64_MAX;
}

/** The Arrow type a CSV column's values fit: integer, float, boolean or text. */
export function csvKind(rows, c) {
  let kind = null;
  for (const row of rows) {
    const v = row[c];
    if (v === undefined || v === '') continue;
    const here = isInt64(v) ? 'int' : Number.isFinite(Number(v)) ? 'float' : /^(true|false)$/i.test(v) ? 'bool' : 'text';
    if (kind === null || kind === here) kind = here;
    else if ((kind === 'int' && here === 'float') || (kind === 'float' && here === 'int')) kind = 'float';
    else return 'text';
  }
  return kind || 'empty';
}

/** A CSV time value in nanoseconds: an integer in the chosen epoch unit, or an RFC 3339 date. */
export function csvTime(value, unit, line) {
  const nanos = parseCsvTime(value, unit, line);
  if (nanos < INT64_MIN || nanos > INT64_MAX) {
    throw new Error(`line ${line}: the time ${value} is past what nanoseconds since 1970 can hold (wrong epoch unit?)`);
  }
  return nanos;
}

function parseCsvTime(value, unit, line) {
  if (/^[+-]?\d+$/.test(value)) return BigInt(value) * NANOS_PER_UNIT[['s', 'ms', 'us', 'ns'].indexOf(unit)];
  const match = /^(.*?)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)?$/.exec(value.trim());
  // a date and time without an offset is UTC (a bare date already is)
  const zone = match && (match[3] || (/[T ]\d/.test(match[1]) ? 'Z' : ''));
  const ms = Date.parse(match ? match[1] + zone : value);
  if (!match || Number.isNaN(ms)) throw new Error(`line ${line}: the time ${JSON.stringify(value)} is neither an integer nor an RFC 3339 date`);
  const fraction = BigInt((match[2] || '').padEnd(9, '0') || '0');
  return BigInt(ms) * 1000000n + fraction;
}
