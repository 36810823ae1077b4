// The Upload page: a line-protocol file sent in requests cut between entries (rejected lines
// listed), or a CSV file read in the browser, typed and sent as Arrow IPC streams.

import { api, errorText } from '../api.js';
import { CSV_COLUMN, tagColumn } from '../arrow-encode.js';
import { csvKind, csvTime, parseCsv } from '../csv.js';
import { loadDatabases } from '../databases.js';
import { $ } from '../dom.js';
import { state } from '../state.js';

/** Characters of line protocol per upload request (cut between entries). */
const LP_CHUNK_CHARS = 4 << 20;
/** Rejected lines an upload lists (all are counted). */
const MAX_LISTED_REJECTS = 200;
/** Rows of a CSV file per upload request. */
const CSV_CHUNK_ROWS = 50000;

function uploadFormat() {
  const chosen = $('upload-format').value;
  if (chosen !== 'auto') return chosen;
  const file = $('upload-file').files[0];
  return file && /\.csv$/i.test(file.name) ? 'csv' : 'lp';
}

export function showUploadOptions() {
  const format = uploadFormat();
  $('lp-options').hidden = format !== 'lp';
  $('csv-options').hidden = format !== 'csv';
}

/** A newly chosen file names the table its CSV rows go into (editable before uploading). */
function chooseUploadFile() {
  const file = $('upload-file').files[0];
  if (file) $('upload-table').value = file.name.replace(/\.[^.]*$/, '');
  showUploadOptions();
}

async function upload(event) {
  event.preventDefault();
  const file = $('upload-file').files[0];
  const db = $('upload-db').value.trim();
  if (!file || !db) return;
  $('upload-button').disabled = true;
  $('upload-errors').hidden = true;
  $('upload-progress').hidden = false;
  $('upload-progress').value = 0;
  try {
    const summary = uploadFormat() === 'csv' ? await uploadCsv(file, db) : await uploadLineProtocol(file, db);
    $('upload-status').textContent = summary;
    state.db = db;
    sessionStorage.setItem('quiver.db', db);
    loadDatabases();
  } catch (e) {
    $('upload-status').textContent = 'Upload stopped.';
    $('upload-errors').textContent = e.message;
    $('upload-errors').hidden = false;
  } finally {
    $('upload-button').disabled = false;
  }
}

/**
 * The end of the line-protocol entry that ends at or after `target`: a line end outside a
 * quoted string field value (a string field may hold line breaks), scanning from `start`, the
 * start of an entry.
 */
function entryBoundary(text, start, target) {
  let section = 0; // 0: measurement and tags, 1: fields, 2: timestamp
  let quoted = false;
  let escaped = false;
  for (let i = start; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (escaped) escaped = false;
    else if (c === 92) escaped = true; // a backslash escapes the next character
    else if (c === 34 && section === 1) quoted = !quoted;
    else if (c === 32 && !quoted) section += 1;
    else if (c === 10 && !quoted) {
      if (i + 1 >= target) return i + 1;
      section = 0;
    }
  }
  return text.length;
}

/** Sends a line-protocol file in requests of about `LP_CHUNK_CHARS`, cut between entries. */
async function uploadLineProtocol(file, db) {
  const text = await file.text();
  const precision = $('upload-precision').value;
  let offset = 0;
  let firstLine = 1;
  let written = 0;
  let rejectedCount = 0;
  const rejected = [];
  const listed = () => (rejectedCount ? `\n${rejectedCount} line${rejectedCount === 1 ? '' : 's'} rejected:\n${rejected.join('\n')}` : '');
  while (offset < text.length) {
    const end = entryBoundary(text, offset, offset + LP_CHUNK_CHARS);
    const chunk = text.slice(offset, end);
    const lines = chunk.split('\n').length - (chunk.endsWith('\n') ? 1 : 0);
    const query = new URLSearchParams({ db, precision });
    const response = await api(`/api/v3/write_lp?${query}`, { method: 'POST', body: chunk });
    const wrote = Number(response.headers.get('x-quiver-lines-written')) || 0;
    if (!response.ok) {
      const body = await response.text();
      let parsed = null;
      try { parsed = JSON.parse(body); } catch (_) { /* not JSON */ }
      if (response.status !== 400 || !parsed || !Array.isArray(parsed.data) || !response.headers.has('x-quiver-lines-written')) {
        throw new Error(`Stopped at line ${firstLine}: ${parsed && parsed.error ? parsed.error : body || response.status}.\n` +
          `${written.toLocaleString('en')} lines before it were written; nothing from it on was.${listed()}`);
      }
      // some lines rejected, the rest of this request written
      rejectedCount += Number(response.headers.get('x-quiver-lines-rejected')) || parsed.data.length;
      // listed up to MAX_LISTED_REJECTS (a file of bad lines is counted, not kept)
      for (const line of parsed.data.slice(0, MAX_LISTED_REJECTS - rejected.length)) {
        rejected.push(`line ${line.line_number + firstLine - 1}: ${line.error_message} (${line.original_line})`);
      }
    }
    written += wrote;
    offset = end;
    firstLine += lines;
    $('upload-progress').value = offset / text.length;
    $('upload-status').textContent = `${Math.round((100 * offset) / text.length)} % · ${written.toLocaleString('en')} lines written`;
  }
  if (rejectedCount) {
    $('upload-errors').textContent = listed().trimStart() +
      (rejected.length < rejectedCount ? `\n(the first ${rejected.length} listed)` : '');
    $('upload-errors').hidden = false;
  }
  return `Wrote ${written.toLocaleString('en')} lines of ${file.name} to ${db}` +
    (rejectedCount ? `; ${rejectedCount} rejected (listed below).` : '.');
}

/** Sends a CSV file as Arrow IPC streams of `CSV_CHUNK_ROWS` rows to `/api/v3/write_arrow`. */
async function uploadCsv(file, db) {
  const table = $('upload-table').value.trim();
  const timeColumn = $('upload-time').value.trim() || 'time';
  if (!table) throw new Error('Name the table the CSV rows go into.');
  const rows = parseCsv(await file.text());
  if (rows.length < 2) throw new Error('The CSV file needs a header row and at least one row of data.');
  const header = rows.shift();
  const timeIndex = header.indexOf(timeColumn);
  if (timeIndex === -1) throw new Error(`The CSV header has no column ${JSON.stringify(timeColumn)} (columns: ${header.join(', ')}).`);
  // every row checked, every time read, before anything is sent
  const unit = $('upload-epoch').value;
  const times = new BigInt64Array(rows.length);
  rows.forEach((row, i) => {
    if (row.length !== header.length) throw new Error(`line ${row.line}: ${row.length} fields where the header names ${header.length}`);
    if (row[timeIndex] === '') throw new Error(`line ${row.line}: the time is empty`);
    times[i] = csvTime(row[timeIndex], unit, row.line);
  });
  const kinds = header.map((_, c) => csvKind(rows, c));
  const tagInput = $('upload-tags').value.trim();
  const tags = new Set(tagInput ? tagInput.split(',').map((t) => t.trim()).filter(Boolean)
    : header.filter((name, c) => c !== timeIndex && kinds[c] === 'text'));
  for (const tag of tags) {
    if (!header.includes(tag)) throw new Error(`The tag column ${JSON.stringify(tag)} is not in the CSV header.`);
    if (tag === timeColumn) throw new Error(`The time column ${JSON.stringify(tag)} cannot be a tag.`);
  }
  let sent = 0;
  for (let start = 0; start < rows.length; start += CSV_CHUNK_ROWS) {
    const chunk = rows.slice(start, start + CSV_CHUNK_ROWS);
    const columns = {};
    header.forEach((name, c) => {
      if (kinds[c] === 'empty') return; // no value in the whole file: not written (as quiver import)
      const values = chunk.map((row) => (row[c] === '' ? null : row[c]));
      if (c === timeIndex) {
        const data = times.slice(start, start + chunk.length);
        columns[name] = Arrow.makeVector({ type: new Arrow.TimestampNanosecond('UTC'), data });
      } else {
        columns[name] = Arrow.makeVector((tags.has(name) ? tagColumn : CSV_COLUMN[kinds[c]])(values));
      }
    });
    const body = Arrow.tableToIPC(new Arrow.Table(columns), 'stream');
    const query = new URLSearchParams({ db, table });
    const response = await api(`/api/v3/write_arrow?${query}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/vnd.apache.arrow.stream' },
      body,
    });
    if (!response.ok) {
      throw new Error(`Rows from line ${chunk[0].line} on were not written: ${await errorText(response)}\n` +
        `${sent.toLocaleString('en')} rows before them were written.`);
    }
    sent += chunk.length;
    $('upload-progress').value = sent / rows.length;
    $('upload-status').textContent = `${Math.round((100 * sent) / rows.length)} % · ${sent.toLocaleString('en')} rows written`;
  }
  const empty = header.filter((_, c) => kinds[c] === 'empty' && c !== timeIndex);
  return `Wrote ${sent.toLocaleString('en')} rows of ${file.name} to ${db}.${table} (tags: ${[...tags].join(', ') || 'none'})` +
    (empty.length ? `; no value in the whole file, not written: ${empty.join(', ')}.` : '.');
}

/** Wires the upload form: the chosen file and format show their options, submit uploads. */
export function initUploadPage() {
  $('upload-form').addEventListener('submit', upload);
  $('upload-file').addEventListener('change', chooseUploadFile);
  $('upload-format').addEventListener('change', showUploadOptions);
}
