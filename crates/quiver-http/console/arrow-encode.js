// The Arrow encoder of the upload page: columns of CSV values (strings, null for an empty field)
// as Arrow data (UTF-8, dictionary-encoded tags, float64, int64, boolean) for the global `Arrow`
// of vendor/arrow.min.js to write as IPC. The columns are built from their buffers: Arrow's own
// builders compile code at run time, which the page's Content-Security-Policy (no
// 'unsafe-eval') forbids.

/** The validity bitmap of `values` (null entries unset), omitted when none is null. */
function validity(values) {
  const bitmap = new Uint8Array((values.length + 7) >> 3);
  let nullCount = 0;
  values.forEach((v, i) => {
    if (v === null) nullCount += 1;
    else bitmap[i >> 3] |= 1 << (i & 7);
  });
  return { nullBitmap: nullCount ? bitmap : undefined, nullCount };
}

export function utf8Column(values) {
  const encoder = new TextEncoder();
  const encoded = values.map((v) => (v === null ? new Uint8Array(0) : encoder.encode(v)));
  const valueOffsets = new Int32Array(values.length + 1);
  encoded.forEach((bytes, i) => { valueOffsets[i + 1] = valueOffsets[i] + bytes.length; });
  const data = new Uint8Array(valueOffsets[values.length]);
  encoded.forEach((bytes, i) => data.set(bytes, valueOffsets[i]));
  return Arrow.makeData({ type: new Arrow.Utf8(), length: values.length, ...validity(values), valueOffsets, data });
}

/** Dictionary-encoded strings: how Quiver's Arrow ingest recognises tags. */
export function tagColumn(values) {
  const keys = new Int32Array(values.length);
  const index = new Map();
  values.forEach((v, i) => {
    if (v === null) return;
    if (!index.has(v)) index.set(v, index.size);
    keys[i] = index.get(v);
  });
  const dictionary = Arrow.makeVector(utf8Column([...index.keys()]));
  const type = new Arrow.Dictionary(new Arrow.Utf8(), new Arrow.Int32());
  return Arrow.makeData({ type, length: values.length, ...validity(values), data: keys, dictionary });
}

export function float64Column(values) {
  const data = Float64Array.from(values, (v) => (v === null ? 0 : Number(v)));
  return Arrow.makeData({ type: new Arrow.Float64(), length: values.length, ...validity(values), data });
}

export function int64Column(values) {
  const data = BigInt64Array.from(values, (v) => (v === null ? 0n : BigInt(v)));
  return Arrow.makeData({ type: new Arrow.Int64(), length: values.length, ...validity(values), data });
}

export function boolColumn(values) {
  const data = new Uint8Array((values.length + 7) >> 3);
  values.forEach((v, i) => {
    if (v !== null && v.toLowerCase() === 'true') data[i >> 3] |= 1 << (i & 7);
  });
  return Arrow.makeData({ type: new Arrow.Bool(), length: values.length, ...validity(values), data });
}

/** The column of each kind of CSV values (csv.js's `csvKind`; tags are `tagColumn`). */
export const CSV_COLUMN = { int: int64Column, float: float64Column, bool: boolColumn, text: utf8Column };
