// The Quiver console: a query editor with results as a table and a chart (Query), the server's
// figures refreshed live (Server), and file uploads (Upload). It talks to the server's public
// HTTP API only, as any client does; answers arrive as Arrow IPC streams, read by Apache Arrow's
// JavaScript library, and charts are drawn by uPlot. No network beyond this server.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);

  /** Rows drawn above and below the visible ones in the result table. */
  const OVERSCAN_ROWS = 12;
  /** The tallest scrolling area the table makes (browsers cap an element's height near
   * 17-33 million pixels): past it, a scroll position maps to rows proportionally. */
  const MAX_SCROLL_PX = 8000000;
  /** Most series drawn in one chart (a chart of a thousand lines shows nothing). */
  const MAX_SERIES = 24;
  /** How often the server page refreshes its figures, in milliseconds. */
  const REFRESH_MS = 2000;
  /** Samples of the server page's rate chart (five minutes at one per refresh). */
  const RATE_SAMPLES = 150;
  /** Characters of line protocol per upload request (cut between entries). */
  const LP_CHUNK_CHARS = 4 << 20;
  /** Rejected lines an upload lists (all are counted). */
  const MAX_LISTED_REJECTS = 200;
  /** Rows of a CSV file per upload request. */
  const CSV_CHUNK_ROWS = 50000;
  const PALETTE = ['#2f6fdd', '#e8590c', '#2b8a3e', '#c2255c', '#7048e8', '#0c8599', '#e67700',
    '#5c940d', '#862e9c', '#1864ab', '#a61e4d', '#087f5b'];

  const state = {
    token: sessionStorage.getItem('quiver.token') || '',
    db: sessionStorage.getItem('quiver.db') || '',
    result: null,
    view: 'table',
    running: null,
    chart: null,
    schemaLoads: 0,
    serverTimer: null,
    samples: [],
    rateChart: null,
  };

  // ---------------------------------------------------------------- HTTP

  /** `fetch` of a path of this server, carrying the tab's token. */
  async function api(path, options = {}) {
    const headers = new Headers(options.headers || {});
    if (state.token) headers.set('Authorization', 'Bearer ' + state.token);
    const response = await fetch(path, { ...options, headers });
    if (response.status === 401) {
      openLogin(await errorText(response.clone()));
    }
    return response;
  }

  /** The message of an error response: its JSON `error` (and rejected lines), or its text. */
  async function errorText(response) {
    const text = await response.text();
    try {
      const body = JSON.parse(text);
      let message = body.error || body.message || text;
      if (Array.isArray(body.data)) {
        for (const line of body.data.slice(0, 50)) {
          message += `\nline ${line.line_number}: ${line.error_message} (${line.original_line})`;
        }
      }
      return message;
    } catch (_) {
      return `${response.status} ${response.statusText}${text ? ': ' + text : ''}`;
    }
  }

  async function getJson(path) {
    const response = await api(path);
    if (!response.ok) throw new Error(await errorText(response));
    return response.json();
  }

  /** A query's answer in `format` (a `Response`), in SQL or InfluxQL. */
  function postQuery(query, format, signal) {
    const path = query.language === 'influxql' ? '/api/v3/query_influxql' : '/api/v3/query_sql';
    return api(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ db: query.db, q: query.text, format }),
      signal,
    });
  }

  // ---------------------------------------------------------------- login and databases

  /** Asks for a token (once: a dialog already open keeps what is being typed in it). */
  function openLogin(reason) {
    $('login-reason').textContent = reason || '';
    if ($('login').open) return;
    $('login-token').value = state.token;
    $('login').showModal();
    $('login-token').focus();
  }

  function setToken(token) {
    state.token = token;
    if (token) sessionStorage.setItem('quiver.token', token);
    else sessionStorage.removeItem('quiver.token');
    showWho();
    loadDatabases();
  }

  function showWho() {
    $('who').textContent = state.token ? 'token set for this tab' : 'no token';
    $('login-button').textContent = state.token ? 'Change token' : 'Log in';
  }

  async function loadDatabases() {
    const select = $('db');
    let names = [];
    try {
      names = (await getJson('/api/v3/configure/database')).map((d) => d.db);
    } catch (e) {
      showError(`Cannot list the databases: ${e.message}`);
    }
    select.replaceChildren();
    if (names.length === 0) {
      select.append(new Option('(none yet: a write creates one)', ''));
    }
    for (const name of names) select.append(new Option(name, name));
    if (!names.includes(state.db)) state.db = names[0] || '';
    select.value = state.db;
    $('upload-dbs').replaceChildren(...names.map((n) => new Option(n)));
    if (!$('upload-db').value) $('upload-db').value = state.db;
    loadSchema();
  }

  // ---------------------------------------------------------------- table browser

  /** Lists the tables of the chosen database (only the latest of overlapping loads shows). */
  async function loadSchema() {
    const load = ++state.schemaLoads;
    const tree = $('schema-tree');
    const note = (text) => {
      if (load === state.schemaLoads) $('schema-note').textContent = text;
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
    if (load !== state.schemaLoads || !rows) return;
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
    if (state.running) {
      state.running.abort();
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
    state.running = controller;
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
      state.running = null;
      $('run').textContent = 'Run';
    }
  }

  function showError(message) {
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
    state.result = result;
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
    showView(state.view === 'chart' && result.chartSpec ? 'chart' : 'table');
  }

  // ---------------------------------------------------------------- cells

  /** A result column: its name, type and a reader of its value at a row as text (or null). */
  function describeColumn(field, vector) {
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
  function rawValues(vector) {
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

  const NANOS_PER_UNIT = [1000000000n, 1000000n, 1000n, 1n];

  function toNanos(value, unit) {
    return BigInt(value) * NANOS_PER_UNIT[unit];
  }

  /** RFC 3339 in UTC with every significant digit of a nanosecond timestamp. */
  function timestampText(nanos) {
    let seconds = nanos / 1000000000n;
    let fraction = nanos % 1000000000n;
    if (fraction < 0n) {
      fraction += 1000000000n;
      seconds -= 1n;
    }
    const date = new Date(Number(seconds) * 1000);
    if (Number.isNaN(date.getTime())) return `${nanos} ns since 1970`; // past what Date holds
    const whole = date.toISOString().replace(/\.\d{3}Z$/, '');
    const digits = fraction === 0n ? '' : '.' + fraction.toString().padStart(9, '0').replace(/0+$/, '');
    return `${whole}${digits}Z`;
  }

  // ---------------------------------------------------------------- result table

  function showView(view) {
    state.view = view;
    $('view-table').setAttribute('aria-selected', String(view === 'table'));
    $('view-chart').setAttribute('aria-selected', String(view === 'chart'));
    $('table').hidden = view !== 'table';
    $('chart').hidden = view !== 'chart';
    if (!state.result) return;
    if (view === 'table') renderTable(state.result);
    else renderChart(state.result);
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

  /** Tick labels of a UTC time axis, as precise as the tick spacing (`increment`, seconds). */
  function utcTicks(_, splits, _axis, _space, increment) {
    return splits.map((ts) => {
      const iso = new Date(ts * 1e3).toISOString();
      if (increment >= 86400) return iso.slice(0, 10);
      if (increment >= 60) return iso.slice(5, 16).replace('T', ' ');
      if (increment >= 1) return iso.slice(11, 19);
      return iso.slice(11, 23);
    });
  }

  /** A time axis's legend value: the instant in RFC 3339, UTC. */
  function utcValue(_, ts) {
    return ts == null ? '–' : new Date(ts * 1e3).toISOString().replace('.000Z', 'Z');
  }

  /** uPlot options shared by every time chart: UTC ticks and legend, x zoom by dragging. */
  function timeChartOptions(width, height, timeLabel) {
    return {
      width,
      height,
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC'),
      scales: { x: { time: true } },
      cursor: { drag: { x: true, y: false } },
      axes: [{ values: utcTicks, space: 80 }, {}],
      series: [{ label: timeLabel, value: utcValue }],
    };
  }

  function renderChart(result) {
    const box = $('chart');
    if (state.chart) {
      state.chart.destroy();
      state.chart = null;
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
    state.chart = new uPlot(options, made.data, plot);
  }

  // ---------------------------------------------------------------- downloads

  const DOWNLOADS = {
    csv: { extension: 'csv', type: 'text/csv' },
    parquet: { extension: 'parquet', type: 'application/vnd.apache.parquet' },
    arrow: { extension: 'arrow', type: 'application/vnd.apache.arrow.stream' },
  };

  /** Saves the answer: the Arrow bytes as received, or the query run again in another format. */
  async function download(format) {
    const result = state.result;
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

  // ---------------------------------------------------------------- server page

  /** The Prometheus text format as a map of metric name to the sum over its label sets. */
  function parseMetrics(text) {
    const metrics = new Map();
    for (const line of text.split('\n')) {
      if (!line || line.startsWith('#')) continue;
      const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
      if (!match) continue;
      const value = Number(match[3]);
      if (Number.isFinite(value)) metrics.set(match[1], (metrics.get(match[1]) || 0) + value);
    }
    return metrics;
  }

  function bytes(n) {
    if (n == null || Number.isNaN(n)) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i += 1;
    }
    return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
  }

  function count(n) {
    return n == null || Number.isNaN(n) ? '–' : Math.round(n).toLocaleString('en');
  }

  function percent(ratio) {
    return ratio == null || Number.isNaN(ratio) ? '–' : `${(ratio * 100).toFixed(1)} %`;
  }

  async function refreshServer() {
    if ($('login').open) return; // a token is being typed: no request until it is given
    const settled = await Promise.allSettled([
      api('/metrics').then((r) => (r.ok ? r.text() : errorText(r).then((m) => Promise.reject(new Error(m))))),
      getJson('/api/v3/cache'),
      getJson('/api/v3/storage'),
      getJson('/api/v3/queries'),
    ]);
    const [metricsText, cache, storage, queries] = settled.map((s) => (s.status === 'fulfilled' ? s.value : null));
    const problems = settled.filter((s) => s.status === 'rejected').map((s) => s.reason.message);
    const now = Date.now();
    $('server-status').textContent = (problems.length ? `Some figures are unavailable: ${[...new Set(problems)].join('; ')} · ` : '') +
      `updated ${new Date(now).toISOString().slice(11, 19)} UTC`;
    const m = metricsText ? parseMetrics(metricsText) : new Map();
    const sample = {
      t: now / 1000,
      rows: m.get('quiver_ingest_rows_total'),
      bytes: m.get('quiver_ingest_bytes_total'),
      requests: m.get('quiver_requests_total'),
    };
    const previous = state.samples[state.samples.length - 1];
    const rate = (key) => (previous && sample[key] != null && previous[key] != null
      ? Math.max(0, (sample[key] - previous[key]) / (sample.t - previous.t)) : null);
    sample.rowRate = rate('rows');
    sample.byteRate = rate('bytes');
    sample.requestRate = rate('requests');
    state.samples.push(sample);
    if (state.samples.length > RATE_SAMPLES) state.samples.shift();
    renderCards(m, sample, cache, storage);
    renderRates();
    renderQueries(queries ? queries.queries : null);
    renderTableFiles(storage ? storage.compaction : null);
  }

  function renderCards(m, sample, cache, storage) {
    const g = (name) => m.get(name);
    const wal = storage && storage.wal;
    const persistence = storage && storage.persistence;
    const compaction = storage && storage.compaction;
    const chunks = storage && storage.chunk_cache;
    const cards = [
      ['Ingest', [
        ['rows/s', count(sample.rowRate), true],
        ['bytes/s', bytes(sample.byteRate)],
        ['rows written', count(g('quiver_ingest_rows_total'))],
        ['write buffer', bytes(g('quiver_write_buffer_bytes'))],
      ]],
      ['Result cache', cache ? [
        ['hit ratio', percent(cache.hit_ratio), true],
        ['hits / partial / misses', `${count(cache.hits)} / ${count(cache.partial_hits)} / ${count(cache.misses)}`],
        ['entries', count(cache.entries)],
        ['bytes', `${bytes(cache.bytes)} of ${bytes(cache.capacity_bytes)}`],
        ['rows from cached parts', percent(cache.part_rows_reused_ratio)],
      ] : [['', 'unavailable']]],
      ['Chunk cache', chunks ? [
        ['hits', count(chunks.hits), true],
        ['misses', count(chunks.misses)],
        ['bytes', `${bytes(chunks.bytes)} of ${bytes(chunks.capacity_bytes)}`],
        ['evictions', count(chunks.evictions)],
      ] : [['', 'needs an admin token']]],
      ['Write-ahead log', wal ? [
        ['records', count(wal.records), true],
        ['bytes', bytes(wal.bytes)],
        ['fsyncs', count(wal.fsyncs)],
        ['group commits', count(wal.group_commits)],
      ] : [['', storage ? 'off' : 'needs an admin token']]],
      ['Persistence', persistence ? [
        ['persists', count(persistence.persists), true],
        ['Parquet files written', count(persistence.files)],
        ['rows persisted', count(persistence.rows)],
        ['Parquet bytes', bytes(persistence.parquet_bytes)],
        ['failures', count(persistence.failures)],
      ] : [['', storage ? 'off' : 'needs an admin token']]],
      ['Storage', compaction ? [
        ['Parquet files', count(compaction.files), true],
        ['partitions', count(compaction.partitions)],
        ['most files in a partition', count(compaction.max_files_per_partition)],
        ['compactions', count(compaction.compactions)],
        ['quarantined files', count(compaction.quarantined_files.length)],
      ] : [['', storage ? 'off' : 'needs an admin token']]],
      ['Queries', [
        ['running', count(g('quiver_queries_running')), true],
        ['queued', count(g('quiver_queries_queued'))],
        ['requests/s', sample.requestRate == null ? '–' : sample.requestRate.toFixed(1)],
      ]],
      ['Memory', [
        ['resident', bytes(g('quiver_process_resident_bytes')), true],
        ['held by queries', bytes(g('quiver_query_memory_reserved_bytes'))],
        ['result cache', bytes(g('quiver_result_cache_bytes'))],
        ['chunk cache', bytes(g('quiver_chunk_cache_bytes'))],
      ]],
    ];
    $('cards').replaceChildren(...cards.map(([title, rows]) => {
      const card = document.createElement('section');
      card.className = 'card';
      card.dataset.card = title;
      const h = document.createElement('h3');
      h.textContent = title;
      const list = document.createElement('dl');
      for (const [label, value, big] of rows) {
        const dt = document.createElement('dt');
        dt.textContent = label;
        const dd = document.createElement('dd');
        dd.textContent = value;
        if (big) dd.className = 'big';
        list.append(dt, dd);
      }
      card.append(h, list);
      return card;
    }));
  }

  function renderRates() {
    const samples = state.samples.filter((s) => s.rowRate != null);
    const data = [samples.map((s) => s.t), samples.map((s) => s.rowRate), samples.map((s) => s.requestRate)];
    if (samples.length < 2) return; // one instant has no time range to draw
    if (state.rateChart) {
      state.rateChart.setData(data);
      return;
    }
    const box = $('rates-chart');
    const options = timeChartOptions(Math.max(400, box.clientWidth - 24), 180, 'time (UTC)');
    options.series.push(
      { label: 'rows written/s', stroke: PALETTE[0], width: 1.5, scale: 'rows' },
      { label: 'requests/s (this page\'s included)', stroke: PALETTE[1], width: 1.5, scale: 'requests' },
    );
    options.axes = [options.axes[0], { scale: 'rows' }, { scale: 'requests', side: 1, grid: { show: false } }];
    state.rateChart = new uPlot(options, data, box);
  }

  function renderQueries(queries) {
    const table = $('queries');
    const header = tableRow('th', ['id', 'database', 'protocol', 'state', 'elapsed', 'memory', 'query', '']);
    if (!queries) {
      table.replaceChildren(header, tableRow('td', ['unavailable']));
      return;
    }
    if (queries.length === 0) {
      table.replaceChildren(header, tableRow('td', ['none right now']));
      return;
    }
    table.replaceChildren(header, ...queries.map((q) => {
      const row = tableRow('td', [String(q.id), q.db, q.protocol, q.state, `${q.elapsed_secs.toFixed(1)} s`, bytes(q.memory_bytes), q.sql]);
      row.children[6].className = 'sql';
      row.children[6].title = q.sql;
      for (const i of [0, 4, 5]) row.children[i].className = 'num';
      const cancel = document.createElement('button');
      cancel.type = 'button';
      cancel.className = 'danger';
      cancel.textContent = 'Cancel';
      cancel.addEventListener('click', async () => {
        const response = await api(`/api/v3/queries/${q.id}`, { method: 'DELETE' });
        $('server-status').textContent = response.ok ? `query ${q.id} cancelled` : await errorText(response);
        refreshServer();
      });
      const td = document.createElement('td');
      td.append(cancel);
      row.append(td);
      return row;
    }));
  }

  function renderTableFiles(compaction) {
    const table = $('tables');
    const header = tableRow('th', ['database', 'table', 'files', 'partitions', 'rows', 'bytes']);
    if (!compaction) {
      table.replaceChildren(header, tableRow('td', ['needs an admin token']));
      return;
    }
    const tables = compaction.tables || [];
    if (tables.length === 0) {
      table.replaceChildren(header, tableRow('td', ['no Parquet files yet (writes are persisted after a while)']));
      return;
    }
    table.replaceChildren(header, ...tables.map((t) => {
      const row = tableRow('td', [t.db, t.table, count(t.files), count(t.partitions), count(t.rows), bytes(t.bytes)]);
      for (const i of [2, 3, 4, 5]) row.children[i].className = 'num';
      return row;
    }));
  }

  function tableRow(tag, cells) {
    const row = document.createElement('tr');
    for (const text of cells) {
      const c = document.createElement(tag);
      c.textContent = text;
      row.append(c);
    }
    return row;
  }

  // ---------------------------------------------------------------- upload

  function uploadFormat() {
    const chosen = $('upload-format').value;
    if (chosen !== 'auto') return chosen;
    const file = $('upload-file').files[0];
    return file && /\.csv$/i.test(file.name) ? 'csv' : 'lp';
  }

  function showUploadOptions() {
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

  /**
   * Parses CSV text (RFC 4180: quoted fields with doubled quotes and line breaks, CRLF; a
   * leading byte-order mark is dropped) into rows of strings; each row's `line` is the line of
   * the file it starts on. Blank lines are skipped.
   */
  function parseCsv(text) {
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

  function isInt64(text) {
    if (!/^[+-]?\d+$/.test(text)) return false;
    const value = BigInt(text);
    return value >= INT64_MIN && value <= INT64_MAX;
  }

  /** The Arrow type a CSV column's values fit: integer, float, boolean or text. */
  function csvKind(rows, c) {
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
  function csvTime(value, unit, line) {
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

  // Arrow columns built from their buffers: Arrow's own builders compile code at run time,
  // which the page's Content-Security-Policy (no 'unsafe-eval') forbids.

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

  function utf8Column(values) {
    const encoder = new TextEncoder();
    const encoded = values.map((v) => (v === null ? new Uint8Array(0) : encoder.encode(v)));
    const valueOffsets = new Int32Array(values.length + 1);
    encoded.forEach((bytes, i) => { valueOffsets[i + 1] = valueOffsets[i] + bytes.length; });
    const data = new Uint8Array(valueOffsets[values.length]);
    encoded.forEach((bytes, i) => data.set(bytes, valueOffsets[i]));
    return Arrow.makeData({ type: new Arrow.Utf8(), length: values.length, ...validity(values), valueOffsets, data });
  }

  /** Dictionary-encoded strings: how Quiver's Arrow ingest recognises tags. */
  function tagColumn(values) {
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

  function float64Column(values) {
    const data = Float64Array.from(values, (v) => (v === null ? 0 : Number(v)));
    return Arrow.makeData({ type: new Arrow.Float64(), length: values.length, ...validity(values), data });
  }

  function int64Column(values) {
    const data = BigInt64Array.from(values, (v) => (v === null ? 0n : BigInt(v)));
    return Arrow.makeData({ type: new Arrow.Int64(), length: values.length, ...validity(values), data });
  }

  function boolColumn(values) {
    const data = new Uint8Array((values.length + 7) >> 3);
    values.forEach((v, i) => {
      if (v !== null && v.toLowerCase() === 'true') data[i >> 3] |= 1 << (i & 7);
    });
    return Arrow.makeData({ type: new Arrow.Bool(), length: values.length, ...validity(values), data });
  }

  const CSV_COLUMN = { int: int64Column, float: float64Column, bool: boolColumn, text: utf8Column };

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

  // ---------------------------------------------------------------- pages

  function showPage() {
    const page = (location.hash || '#query').slice(1);
    const known = ['query', 'server', 'upload'].includes(page) ? page : 'query';
    for (const name of ['query', 'server', 'upload']) {
      $(`page-${name}`).hidden = name !== known;
      if (name === known) $(`nav-${name}`).setAttribute('aria-current', 'page');
      else $(`nav-${name}`).removeAttribute('aria-current');
    }
    clearInterval(state.serverTimer);
    state.serverTimer = null;
    if (known === 'server') {
      refreshServer();
      state.serverTimer = setInterval(refreshServer, REFRESH_MS);
    }
  }

  function start() {
    showWho();
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
    $('db').addEventListener('change', () => {
      state.db = $('db').value;
      sessionStorage.setItem('quiver.db', state.db);
      loadSchema();
    });
    $('schema-filter').addEventListener('input', filterSchema);
    $('view-table').addEventListener('click', () => showView('table'));
    $('view-chart').addEventListener('click', () => showView('chart'));
    for (const button of document.querySelectorAll('[data-download]')) {
      button.addEventListener('click', () => download(button.dataset.download));
    }
    $('login-button').addEventListener('click', () => openLogin(''));
    $('login-form').addEventListener('submit', () => setToken($('login-token').value.trim()));
    $('login-clear').addEventListener('click', () => {
      $('login').close();
      setToken('');
    });
    $('login-cancel').addEventListener('click', () => $('login').close());
    $('upload-form').addEventListener('submit', upload);
    $('upload-file').addEventListener('change', chooseUploadFile);
    $('upload-format').addEventListener('change', showUploadOptions);
    window.addEventListener('hashchange', showPage);
    window.addEventListener('resize', () => {
      if (state.result && state.view === 'chart') renderChart(state.result);
    });
    showUploadOptions();
    showPage();
    loadDatabases();
  }

  start();
})();
