// The Server page: the server's figures (Prometheus metrics, the result cache, storage, the
// queries now running) refreshed live while the page is shown, a chart of ingest and request
// rates over the last five minutes, the running queries (each with a Cancel button) and the
// Parquet files of each table.

import { api, errorText, getJson } from '../api.js';
import { PALETTE, timeChartOptions } from '../charts.js';
import { $ } from '../dom.js';

/** How often the server page refreshes its figures, in milliseconds. */
export const REFRESH_MS = 2000;
/** Samples of the server page's rate chart (five minutes at one per refresh). */
const RATE_SAMPLES = 150;

/** The samples of the rate chart, and the chart once drawn. */
const page = {
  samples: [],
  rateChart: null,
};

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

export async function refreshServer() {
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
  const previous = page.samples[page.samples.length - 1];
  const rate = (key) => (previous && sample[key] != null && previous[key] != null
    ? Math.max(0, (sample[key] - previous[key]) / (sample.t - previous.t)) : null);
  sample.rowRate = rate('rows');
  sample.byteRate = rate('bytes');
  sample.requestRate = rate('requests');
  page.samples.push(sample);
  if (page.samples.length > RATE_SAMPLES) page.samples.shift();
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
  const samples = page.samples.filter((s) => s.rowRate != null);
  const data = [samples.map((s) => s.t), samples.map((s) => s.rowRate), samples.map((s) => s.requestRate)];
  if (samples.length < 2) return; // one instant has no time range to draw
  if (page.rateChart) {
    page.rateChart.setData(data);
    return;
  }
  const box = $('rates-chart');
  const options = timeChartOptions(Math.max(400, box.clientWidth - 24), 180, 'time (UTC)');
  options.series.push(
    { label: 'rows written/s', stroke: PALETTE[0], width: 1.5, scale: 'rows' },
    { label: 'requests/s (this page\'s included)', stroke: PALETTE[1], width: 1.5, scale: 'requests' },
  );
  options.axes = [options.axes[0], { scale: 'rows' }, { scale: 'requests', side: 1, grid: { show: false } }];
  page.rateChart = new uPlot(options, data, box);
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
