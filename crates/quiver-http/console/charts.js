// What the console's time charts share (uPlot, the global `uPlot` of vendor/uplot.min.js): the
// palette of their lines and their options (UTC ticks and legend, zoom by dragging). Used by
// the query page's chart and the server page's rates.

export const PALETTE = ['#2f6fdd', '#e8590c', '#2b8a3e', '#c2255c', '#7048e8', '#0c8599', '#e67700',
  '#5c940d', '#862e9c', '#1864ab', '#a61e4d', '#087f5b'];

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
export function timeChartOptions(width, height, timeLabel) {
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
