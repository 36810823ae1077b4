// The Query page: the table browser (tables and columns of the chosen database), the editor
// (highlighting, Ctrl+Enter), running a query (its answer read as Arrow), the answer as a
// virtual table or a chart, and its downloads (CSV, Parquet, Arrow).

import { errorText, postQuery } from '../api.js';
import { describeColumn, rawValues } from '../cells.js';
import { PALETTE, timeChartOptions } from '../charts.js';
import { $ } from '../dom.js';
import { state } from '../state.js';
import { toNanos } from '../time.js';

/** Rows drawn above and below the visible ones in the result table. */
const OVERSCAN_ROWS = 12;
/** The tallest scrolling area the table makes (browsers cap an element's height near
 * 17-33 million pixels): past it, a scroll position maps to rows proportionally. */
const MAX_SCROLL_PX = 8000000;
/** Most series drawn in one chart (a chart of a thousand lines shows nothing). */
const MAX_SERIES = 24;

/** What the page shows and is doing. */
const page = {
  result: null,
  view: 'table',
  running: null,
  chart: null,
  schemaLoads: 0,
};

// ---------------------------------------------------------------- table browser

/** Lists the tables of the chosen database (only the latest of overlapping loads shows). */
export async function loadSchema() {
  const load = ++page.schemaLoads;
  const tree = $('schema-tree');
  const note = (text) => {
    if (load === page.schemaLoads) $('schema-note').textContent = text;
  };
  if (!state.db) {
    tree.replaceChildren();
    note('No database yet.');
    return;
  }
  const db = state.db;
  const sql = 'SELECT table_name, column_name, data_type FROM information_schema.columns ' +
    `WHERE table_schema = '${db.replaceAll("'", "''")}' ORDER BY table_name, ordinal_position`;
  let rows;
  try {
    const response = await postQuery({ language: 'sql', db, text: sql }, 'json');
    rows = response.ok ? await response.json() : null;
    if (!response.ok) note(`Cannot list the tables: ${await errorText(response)}`);
  } catch (e) {
    note(`Cannot list the tables: ${e.message}`);
  }
  if (load !== page.schemaLoads || !rows) return;
  tree.replaceChildren();
  note('');
  const tables = new Map();
  for (const row of rows) {
    if (!tables.has(row.table_name)) tables.set(row.table_name, []);
    tables.get(row.table_name).push(row);
  }
  for (const [table, columns] of tables) tree.append(tableItem(table, columns));
  if (tables.size === 0) $('schema-note').textContent = 'No tables in this database yet.';
  filterSchema();
}

function tableItem(table, columns) {
  const item = document.createElement('li');
  item.dataset.table = table;
  const head = document.createElement('button');
  head.type = 'button';
  head.className = 'table-name';
  head.setAttribute('aria-expanded', 'false');
  head.title = 'Show columns; double-click for a query of the newest rows';
  head.textContent = table;
  const list = document.createElement('ul');
  list.hidden = true;
  for (const column of columns) {
    const entry = document.createElement('li');
    const button = document.createElement('button');
    button.type = 'button';
    button.title = `Insert ${column.column_name} at the cursor`;
    const name = document.createElement('span');
    name.textContent = column.column_name;
    const type = document.createElement('span');
    type.className = 'type';
    type.textContent = shortType(column.data_type);
    type.title = column.data_type;
    button.append(name, type);
    button.addEventListener('click', () => insertAtCursor(quoteIdent(column.column_name)));
    entry.append(button);
    list.append(entry);
  }
  head.addEventListener('click', () => {
    list.hidden = !list.hidden;
    head.setAttribute('aria-expanded', String(!list.hidden));
  });
  head.addEventListener('dblclick', () => {
    const hasTime = columns.some((c) => c.column_name === 'time');
    setEditor(`SELECT *\nFROM ${quoteIdent(table)}\n${hasTime ? 'ORDER BY time DESC\n' : ''}LIMIT 100`);
  });
  item.append(head, list);
  return item;
}

/** A column type as the browser lists it: tags, time and fields by their kind. */
function shortType(type) {
  if (/^Dictionary\(.*Utf8/.test(type)) return 'tag';
  if (type.startsWith('Timestamp')) return 'time';
  return type.replace(/\(.*$/, '').toLowerCase();
}

function quoteIdent(name) {
  return /^[a-z_][a-z0-9_]*$/.test(name) ? name : `"${name.replaceAll('"', '""')}"`;
}

function filterSchema() {
  const needle = $('schema-filter').value.trim().toLowerCase();
  for (const item of $('schema-tree').children) {
    item.hidden = needle !== '' && !item.dataset.table.toLowerCase().includes(needle);
  }
}

// ---------------------------------------------------------------- editor

const KEYWORDS = new Set(('select from where group by order asc desc limit offset having as and or not ' +
  'in is null like ilike between case when then else end join inner left right full outer on using ' +
  'cross union all distinct with interval explain analyze show tables columns insert into values ' +
  'create drop table database measurements measurement tag keys field series fill time now true ' +
  'false filter over partition rows range preceding following current row nulls first last ' +
  'tz slimit soffset retention policies exists cast').split(' '));
const TOKEN = /(--[^\n]*|\/\*[\s\S]*?(?:\*\/|$))|('(?:[^']|'')*'?)|("(?:[^"]|"")*"?)|(\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\b)|([A-Za-z_][A-Za-z0-9_]*)(?=\s*(\())?|([\s\S])/g;

function escapeHtml(text) {
  return text.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
}

/** The query text as highlighted HTML (comments, strings, identifiers, numbers, keywords). */
function highlight(text) {
  let html = '';
  for (const m of text.matchAll(TOKEN)) {
    const [all, comment, string, ident, number, word, call] = m;
    const kind = comment ? 'comment' : string ? 'string' : ident ? 'ident' : number ? 'number'
      : word ? (KEYWORDS.has(word.toLowerCase()) ? 'keyword' : call ? 'function' : '') : '';
    html += kind ? `<span class="tok-${kind}">${escapeHtml(all)}</span>` : escapeHtml(all);
  }
  // a trailing newline needs a line of its own to keep the overlay aligned
  return html + '\n';
}

function renderHighlight() {
  $('highlight').innerHTML = highlight($('editor').value);
  syncScroll();
}

function syncScroll() {
  $('highlight').scrollTop = $('editor').scrollTop;
  $('highlight').scrollLeft = $('editor').scrollLeft;
}

function setEditor(text) {
  const editor = $('editor');
  editor.value = text;
  sessionStorage.setItem('quiver.query', text);
  renderHighlight();
  editor.focus();
}

function insertAtCursor(text) {
  const editor = $('editor');
  editor.focus();
  editor.setRangeText(text, editor.selectionStart, editor.selectionEnd, 'end');
  renderHighlight();
}

// ---------------------------------------------------------------- running a query

async function runQuery() {
  if (page.running) {
    page.running.abort();
    return;
  }
  const editor = $('editor');
  const selected = editor.value.slice(editor.selectionStart, editor.selectionEnd);
  const text = (selected.trim() ? selected : editor.value).trim();
  if (!text) return;
  if (!state.db) {
    showError('Choose a database first (a write creates one).');
    return;
  }
  const query = { language: $('language').value, db: state.db, text };
  const controller = new AbortController();
  page.running = controller;
  $('run').textContent = 'Cancel';
  $('status').textContent = 'Running…';
  hideError();
  const started = performance.now();
  try {
    const response = await postQuery(query, 'arrow', controller.signal);
    if (!response.ok) {
      const message = await errorText(response);
      $('status').textContent = `Failed (${response.status}) after ${formatMs(performance.now() - started)}`;
      showError(message);
      return;
    }
    const bytes = new Uint8Array(await response.arrayBuffer());
    const elapsed = performance.now() - started;
    let table;
    try {
      table = Arrow.tableFromIPC(bytes);
    } catch (e) {
      throw new Error(`The answer could not be read (cut short by an error?): ${e.message}`);
    }
    showResult({ query, table, bytes, elapsed, verdict: response.headers.get('X-Quiver-Cache') || '' });
    $('status').textContent = '';
  } catch (e) {
    const cancelled = e.name === 'AbortError';
    $('status').textContent = cancelled ? 'Cancelled' : 'Failed';
    if (!cancelled) showError(e.message);
  } finally {
    page.running = null;
    $('run').textContent = 'Run';
  }
}

export function showError(message) {
  $('error').textContent = message;
  $('error').hidden = false;
}

function hideError() {
  $('error').hidden = true;
}

function formatMs(ms) {
  return ms < 1000 ? `${ms.toFixed(1)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

function showResult(answer) {
  const result = { ...answer, columns: answer.table.schema.fields.map((f, i) => describeColumn(f, answer.table.getChildAt(i))) };
  page.result = result;
  const rows = result.table.numRows;
  const info = $('result-info');
  info.replaceChildren(`${rows.toLocaleString('en')} row${rows === 1 ? '' : 's'} · ${result.columns.length} column${result.columns.length === 1 ? '' : 's'} · ${formatMs(result.elapsed)} · cache `);
  const verdict = document.createElement('span');
  verdict.className = `verdict ${result.verdict}`;
  verdict.id = 'verdict';
  verdict.textContent = result.verdict || 'n/a';
  info.append(verdict);
  for (const button of document.querySelectorAll('[data-download]')) button.disabled = false;
  result.chartSpec = chartSpec(result);
  $('view-chart').disabled = !result.chartSpec;
  $('view-chart').title = result.chartSpec ? '' : 'A chart needs a timestamp column and a numeric column';
  showView(page.view === 'chart' && result.chartSpec ? 'chart' : 'table');
}

// ---------------------------------------------------------------- result table

function showView(view) {
  page.view = view;
  $('view-table').setAttribute('aria-selected', String(view === 'table'));
  $('view-chart').setAttribute('aria-selected', String(view === 'chart'));
  $('table').hidden = view !== 'table';
  $('chart').hidden = view !== 'chart';
  if (!page.result) return;
  if (view === 'table') renderTable(page.result);
  else renderChart(page.result);
}

/** Draws the result table: a header, and only the rows in view (a virtual scroll). */
function renderTable(result) {
  const grid = $('table');
  grid.replaceChildren();
  grid.scrollTop = 0;
  const rows = result.table.numRows;
  const rowHeight = parseFloat(getComputedStyle(document.documentElement).getPropertyValue('--row')) || 26;
  const widths = columnWidths(result);
  const numberWidth = Math.max(5, String(rows).length + 2);
  const head = document.createElement('div');
  head.className = 'head';
  head.append(cell(`${numberWidth}ch`, '#', 'rownum'));
  result.columns.forEach((column, c) => {
    const box = cell(widths[c], null, column.numeric ? 'num' : '');
    const name = document.createElement('span');
    name.className = 'name';
    name.textContent = column.name;
    const type = document.createElement('span');
    type.className = 'type';
    type.textContent = column.type;
    box.append(name, type);
    box.title = `${column.name}: ${column.type}`;
    head.append(box);
  });
  grid.append(head);
  if (rows === 0) {
    const empty = document.createElement('div');
    empty.className = 'empty';
    empty.textContent = 'No rows.';
    grid.append(empty);
    grid.onscroll = null;
    return;
  }
  const body = document.createElement('div');
  body.className = 'rows';
  const height = Math.min(rows * rowHeight, MAX_SCROLL_PX);
  body.style.height = `${height}px`;
  grid.append(body);
  let drawn = '';
  const draw = () => {
    const view = grid.clientHeight;
    // the row at the top of the view, fractional; rows are placed relative to it
    const scrollable = Math.max(1, height - view);
    const top = height < rows * rowHeight
      ? (Math.min(grid.scrollTop, scrollable) / scrollable) * Math.max(0, rows - view / rowHeight)
      : grid.scrollTop / rowHeight;
    const first = Math.max(0, Math.floor(top) - OVERSCAN_ROWS);
    const last = Math.min(rows, Math.ceil(top + view / rowHeight) + OVERSCAN_ROWS);
    const key = `${first}:${last}:${top}`;
    if (drawn === key) return;
    drawn = key;
    const fragment = document.createDocumentFragment();
    for (let i = first; i < last; i++) {
      const row = document.createElement('div');
      row.className = 'row';
      row.style.top = `${grid.scrollTop + (i - top) * rowHeight}px`;
      row.append(cell(`${numberWidth}ch`, String(i + 1), 'rownum'));
      result.columns.forEach((column, c) => {
        const value = column.read(i);
        const box = cell(widths[c], value === null ? 'NULL' : value, column.numeric ? 'num' : '');
        if (value === null) box.classList.add('null');
        else box.title = value;
        row.append(box);
      });
      fragment.append(row);
    }
    body.replaceChildren(fragment);
  };
  let scheduled = false;
  grid.onscroll = () => {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => {
      scheduled = false;
      draw();
    });
  };
  draw();
}

function cell(width, text, kind) {
  const box = document.createElement('div');
  box.className = `cell ${kind || ''}`;
  box.style.width = width;
  if (text !== null) {
    const span = document.createElement('span');
    span.textContent = text;
    box.append(span);
  }
  return box;
}

/** Column widths from the header and the first 200 rows, in `ch`, between 6 and 48. */
function columnWidths(result) {
  const sample = Math.min(result.table.numRows, 200);
  return result.columns.map((column) => {
    let longest = Math.max(column.name.length, Math.min(column.type.length, 24));
    for (let i = 0; i < sample; i++) {
      const value = column.read(i);
      longest = Math.max(longest, value === null ? 4 : value.length);
    }
    return `${Math.min(48, Math.max(6, longest + 2))}ch`;
  });
}

// ---------------------------------------------------------------- chart

/** What a chart of the result draws: its time column, numeric columns and series columns. */
function chartSpec(result) {
  const time = result.columns.find((c) => c.timestamp && c.name === 'time') || result.columns.find((c) => c.timestamp);
  const values = result.columns.filter((c) => c.numeric);
  if (!time || values.length === 0) return null;
  return { time, values, groups: result.columns.filter((c) => c.text) };
}

/**
 * The chart's data: one line per numeric column and combination of text columns (a series),
 * at most `MAX_SERIES`; when there are more instants than twice the plot's width, each
 * series is drawn by its minimum and maximum per pixel column (spikes stay visible).
 */
function chartData(result, spec, width) {
  const rows = result.table.numRows;
  const raw = rawValues(spec.time.vector);
  const unit = spec.time.vector.type.unit;
  const series = new Map();
  const dropped = new Set();
  for (let i = 0; i < rows; i++) {
    if (!spec.time.vector.isValid(i)) continue;
    const x = Number(toNanos(raw(i), unit)) / 1e9;
    const key = spec.groups.map((g) => g.read(i) ?? '∅').join(', ');
    for (const column of spec.values) {
      const v = column.vector.get(i);
      if (v == null) continue;
      const label = spec.values.length > 1 || !key ? (key ? `${column.name} · ${key}` : column.name) : key;
      let points = series.get(label);
      if (!points) {
        if (series.size >= MAX_SERIES) {
          dropped.add(label);
          continue;
        }
        points = { xs: [], ys: [] };
        series.set(label, points);
      }
      points.xs.push(x);
      points.ys.push(Number(v));
    }
  }
  const labels = [...series.keys()];
  const all = [...series.values()];
  const instants = [...new Set(all.flatMap((p) => p.xs))].sort((a, b) => a - b);
  const buckets = Math.max(50, Math.floor(width));
  if (instants.length <= 2 * buckets) {
    const position = new Map(instants.map((x, i) => [x, i]));
    const ys = all.map((p) => {
      const line = new Array(instants.length).fill(null);
      p.xs.forEach((x, k) => { line[position.get(x)] = p.ys[k]; });
      return line;
    });
    return { labels, data: [instants, ...ys], decimated: false, dropped: dropped.size, points: instants.length };
  }
  const low = instants[0];
  const step = (instants[instants.length - 1] - low) / buckets || 1;
  const xs = [];
  for (let b = 0; b < buckets; b++) xs.push(low + b * step, low + (b + 0.5) * step);
  const ys = all.map((p) => {
    const line = new Array(2 * buckets).fill(null);
    p.xs.forEach((x, k) => {
      const b = Math.min(buckets - 1, Math.floor((x - low) / step));
      const y = p.ys[k];
      if (line[2 * b] === null || y < line[2 * b]) line[2 * b] = y;
      if (line[2 * b + 1] === null || y > line[2 * b + 1]) line[2 * b + 1] = y;
    });
    return line;
  });
  return { labels, data: [xs, ...ys], decimated: true, dropped: dropped.size, points: instants.length };
}

function renderChart(result) {
  const box = $('chart');
  if (page.chart) {
    page.chart.destroy();
    page.chart = null;
  }
  box.replaceChildren();
  const spec = result.chartSpec;
  if (!spec) return;
  const width = Math.max(400, box.clientWidth - 24);
  const made = chartData(result, spec, width);
  const note = document.createElement('p');
  note.className = 'note';
  note.id = 'chart-note';
  note.textContent = `${made.labels.length} series over ${made.points.toLocaleString('en')} instants of ${spec.time.name} (UTC)` +
    (made.decimated ? '; drawn as min/max per pixel column' : '') +
    (made.dropped ? `; ${made.dropped} more series not drawn (first ${MAX_SERIES} shown)` : '') +
    '. Drag to zoom, double-click to reset.';
  box.append(note);
  const plot = document.createElement('div');
  box.append(plot);
  const options = timeChartOptions(width, Math.max(260, Math.min(460, window.innerHeight - 380)), `${spec.time.name} (UTC)`);
  options.series.push(...made.labels.map((label, i) => ({
    label,
    stroke: PALETTE[i % PALETTE.length],
    width: 1.5,
    spanGaps: true,
    points: { show: false },
  })));
  page.chart = new uPlot(options, made.data, plot);
}

// ---------------------------------------------------------------- downloads

const DOWNLOADS = {
  csv: { extension: 'csv', type: 'text/csv' },
  parquet: { extension: 'parquet', type: 'application/vnd.apache.parquet' },
  arrow: { extension: 'arrow', type: 'application/vnd.apache.arrow.stream' },
};

/** Saves the answer: the Arrow bytes as received, or the query run again in another format. */
async function download(format) {
  const result = page.result;
  if (!result) return;
  let blob;
  if (format === 'arrow') {
    blob = new Blob([result.bytes], { type: DOWNLOADS.arrow.type });
  } else {
    $('status').textContent = `Preparing ${format.toUpperCase()}…`;
    try {
      const response = await postQuery(result.query, format);
      if (!response.ok) throw new Error(await errorText(response));
      blob = await response.blob();
    } catch (e) {
      showError(`The ${format.toUpperCase()} download failed: ${e.message}`);
      return;
    } finally {
      $('status').textContent = '';
    }
  }
  const link = document.createElement('a');
  link.href = URL.createObjectURL(blob);
  link.download = `quiver-${result.query.db}.${DOWNLOADS[format].extension}`;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

// ---------------------------------------------------------------- start

/** Restores the tab's query text into the editor and wires the page's controls. */
export function initQueryPage() {
  $('editor').value = sessionStorage.getItem('quiver.query') ||
    'SELECT table_name, column_name, data_type\nFROM information_schema.columns\nLIMIT 100';
  renderHighlight();
  $('editor').addEventListener('input', () => {
    sessionStorage.setItem('quiver.query', $('editor').value);
    renderHighlight();
  });
  $('editor').addEventListener('scroll', syncScroll);
  $('editor').addEventListener('keydown', (event) => {
    if ((event.ctrlKey || event.metaKey) && event.key === 'Enter') {
      event.preventDefault();
      runQuery();
    }
  });
  $('run').addEventListener('click', runQuery);
  $('schema-filter').addEventListener('input', filterSchema);
  $('view-table').addEventListener('click', () => showView('table'));
  $('view-chart').addEventListener('click', () => showView('chart'));
  for (const button of document.querySelectorAll('[data-download]')) {
    button.addEventListener('click', () => download(button.dataset.download));
  }
  window.addEventListener('resize', () => {
    if (page.result && page.view === 'chart') renderChart(page.result);
  });
}
