// Nanosecond time: the factor of each Arrow time unit (second, milli, micro, nano) and an
// instant as RFC 3339 text in UTC. Used by the query page's cells and charts and by the CSV
// reader of the upload page.

export const NANOS_PER_UNIT = [1000000000n, 1000000n, 1000n, 1n];

export function toNanos(value, unit) {
  return BigInt(value) * NANOS_PER_UNIT[unit];
}

/** RFC 3339 in UTC with every significant digit of a nanosecond timestamp. */
export function timestampText(nanos) {
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
