// The console's entry, loaded as an ES module by index.html after the vendored classic scripts
// that define the globals `Arrow` (vendor/arrow.min.js) and `uPlot` (vendor/uplot.min.js). It
// owns the routing between the pages (by the URL's hash: #query, #server, #upload, the server
// page's refresh timer with it) and the start: the pages, the database picker and the token
// dialog wired, then the databases listed.
//
// The Quiver console: a query editor with results as a table and a chart (Query), the server's
// figures refreshed live (Server), and file uploads (Upload). It talks to the server's public
// HTTP API only, as any client does; answers arrive as Arrow IPC streams, read by Apache Arrow's
// JavaScript library, and charts are drawn by uPlot. No network beyond this server.
//
// Modules: api.js (HTTP calls), state.js (token and database, shared), login.js (the token
// dialog), databases.js (the database picker), pages/query.js, pages/server.js and
// pages/upload.js (one per page), cells.js and charts.js (answers as text and as charts),
// csv.js and arrow-encode.js (the upload page's CSV reader and Arrow encoder), time.js and
// dom.js (small helpers). Every file is listed in crates/quiver-http/src/console.rs.

import { initDatabasePicker, loadDatabases } from './databases.js';
import { $ } from './dom.js';
import { initLogin, showWho } from './login.js';
import { initQueryPage } from './pages/query.js';
import { REFRESH_MS, refreshServer } from './pages/server.js';
import { initUploadPage, showUploadOptions } from './pages/upload.js';

/** The server page's refresh, while it is shown. */
let serverTimer = null;

function showPage() {
  const page = (location.hash || '#query').slice(1);
  const known = ['query', 'server', 'upload'].includes(page) ? page : 'query';
  for (const name of ['query', 'server', 'upload']) {
    $(`page-${name}`).hidden = name !== known;
    if (name === known) $(`nav-${name}`).setAttribute('aria-current', 'page');
    else $(`nav-${name}`).removeAttribute('aria-current');
  }
  clearInterval(serverTimer);
  serverTimer = null;
  if (known === 'server') {
    refreshServer();
    serverTimer = setInterval(refreshServer, REFRESH_MS);
  }
}

function start() {
  showWho();
  initQueryPage();
  initDatabasePicker();
  initLogin(loadDatabases);
  initUploadPage();
  window.addEventListener('hashchange', showPage);
  showUploadOptions();
  showPage();
  loadDatabases();
}

start();
