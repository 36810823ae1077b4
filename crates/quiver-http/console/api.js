// The console's HTTP calls to this server: every request carries the tab's token, a 401 opens
// the token dialog, and an error response is turned into its message. Queries are posted to
// the SQL or InfluxQL endpoint in the format asked for.

import { openLogin } from './login.js';
import { state } from './state.js';

/** `fetch` of a path of this server, carrying the tab's token. */
export async function api(path, options = {}) {
  const headers = new Headers(options.headers || {});
  if (state.token) headers.set('Authorization', 'Bearer ' + state.token);
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401) {
    openLogin(await errorText(response.clone()));
  }
  return response;
}

/** The message of an error response: its JSON `error` (and rejected lines), or its text. */
export async function errorText(response) {
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

export async function getJson(path) {
  const response = await api(path);
  if (!response.ok) throw new Error(await errorText(response));
  return response.json();
}

/** A query's answer in `format` (a `Response`), in SQL or InfluxQL. */
export function postQuery(query, format, signal) {
  const path = query.language === 'influxql' ? '/api/v3/query_influxql' : '/api/v3/query_sql';
  return api(path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ db: query.db, q: query.text, format }),
    signal,
  });
}
