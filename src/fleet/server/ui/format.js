// Formatting shared by the pages: times, durations, GPU counts, byte sizes.

export const JOB_STATES = ['PENDING', 'ADMITTED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED',
  'TIMEOUT', 'PREEMPTED', 'LOST'];
export const ACTIVE_STATES = ['PENDING', 'ADMITTED', 'RUNNING'];
export const TERMINAL_STATES = ['SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMEOUT'];

export function isTerminal(state) {
  return TERMINAL_STATES.includes(state);
}

// GPUs a job holds or asks for: tasks × GPUs per task.
export function jobGpus(job) {
  const spec = job.spec || {};
  return (spec.tasks || 1) * (spec.gpus_per_task || 0);
}

export function duration(ms) {
  if (ms === null || ms === undefined || !isFinite(ms)) return '';
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
  const hours = Math.floor(s / 3600);
  if (hours < 48) return hours + ' h ' + Math.floor((s % 3600) / 60) + ' min';
  return Math.floor(hours / 24) + ' d ' + (hours % 24) + ' h';
}

// "12:03:04" for today, else "2026-12-01 12:03:04" (local time).
export function time(text) {
  if (!text) return '';
  const at = new Date(text);
  if (isNaN(at)) return String(text);
  const pad = (n) => String(n).padStart(2, '0');
  const clock = pad(at.getHours()) + ':' + pad(at.getMinutes()) + ':' + pad(at.getSeconds());
  const today = new Date();
  if (at.toDateString() === today.toDateString()) return clock;
  return at.getFullYear() + '-' + pad(at.getMonth() + 1) + '-' + pad(at.getDate()) + ' ' + clock;
}

export function ago(text) {
  if (!text) return '';
  const at = Date.parse(text);
  if (isNaN(at)) return '';
  return duration(Date.now() - at) + ' ago';
}

export function percent(part, whole) {
  if (!whole) return '–';
  return Math.round((100 * part) / whole) + ' %';
}

// 1288490188 -> "1.2 GiB" (binary units, as the CLI prints them).
export function bytes(n) {
  if (n === null || n === undefined || !isFinite(n)) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let value = Number(n);
  let unit = 0;
  while (value >= 1024 && unit + 1 < units.length) {
    value /= 1024;
    unit++;
  }
  return (unit === 0 ? String(Math.round(value)) : value.toFixed(1)) + ' ' + units[unit];
}

export function count(n, truncated) {
  return truncated ? n + '+' : String(n);
}

// "tenant/team/user" of a job.
export function owner(job) {
  return job.tenant + '/' + job.team + '/' + job.user;
}

// "a=1, b=2"
export function labels(map) {
  return Object.entries(map || {}).map(([k, v]) => k + '=' + v).join(', ');
}
