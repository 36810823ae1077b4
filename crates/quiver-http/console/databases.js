// The database picker in the page's header: the databases the token may see, the one chosen
// (kept for this tab), and the upload page's list of names.

import { getJson } from './api.js';
import { $ } from './dom.js';
import { loadSchema, showError } from './pages/query.js';
import { state } from './state.js';

/** Lists the databases the token may see in the picker (the tab's choice kept if it is still
 * there, else the first) and in the upload page's list, then the chosen one's tables. */
export async function loadDatabases() {
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

/** Wires the picker: a database chosen is kept for the tab and its tables listed. */
export function initDatabasePicker() {
  $('db').addEventListener('change', () => {
    state.db = $('db').value;
    sessionStorage.setItem('quiver.db', state.db);
    loadSchema();
  });
}
