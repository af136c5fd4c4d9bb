// Live updates: the open page refreshes every 2 s. When the server has a
// watch stream of job changes (GET /v1/jobs:watch, server-sent events), each
// event refreshes the page at once and the timer slows to 10 s; when the
// stream is absent (404/405) or cannot be opened, polling carries on alone
// and the stream is tried again later; a stream the server closes (its
// timeout) is opened again at once.
import {authHeaders} from './api.js';

const POLL_MS = 2000;
const POLL_WITH_WATCH_MS = 10000;
const WATCH_RETRY_MS = 30000;

export class Live {
  // `refresh` is called with no arguments and may return a promise; calls
  // never overlap. `onMode` hears 'polling' or 'watch'. `steady`: poll every
  // 2 s even while the stream runs (a page that shows more than job changes,
  // such as a log tail).
  constructor(refresh, onMode, steady = false) {
    this.refresh = refresh;
    this.onMode = onMode;
    this.steady = steady;
    this.mode = 'polling';
    this.running = false;
    this.again = false;
    this.timer = null;
    this.abort = null;
    this.stopped = true;
  }

  start() {
    this.stopped = false;
    this.schedule(0);
    this.watch();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.abort) this.abort.abort();
    this.abort = null;
  }

  // Refresh now (after a change the page made itself, or a watch event).
  kick() {
    if (this.stopped) return;
    this.schedule(0);
  }

  schedule(ms) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.run(), ms);
  }

  async run() {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = true;
    try {
      await this.refresh();
    } finally {
      this.running = false;
    }
    if (this.stopped) return;
    if (this.again) {
      this.again = false;
      this.schedule(0);
    } else {
      this.schedule(this.mode === 'watch' && !this.steady ? POLL_WITH_WATCH_MS : POLL_MS);
    }
  }

  setMode(mode) {
    if (this.mode === mode) return;
    this.mode = mode;
    if (this.onMode) this.onMode(mode);
  }

  async watch() {
    while (!this.stopped) {
      this.abort = new AbortController();
      let streamed = false;
      try {
        const response = await fetch('/v1/jobs:watch', {headers: Object.assign(
            {Accept: 'text/event-stream'}, authHeaders()), cache: 'no-store',
        credentials: 'omit', signal: this.abort.signal});
        const type = response.headers.get('Content-Type') || '';
        if (response.ok && response.body && type.startsWith('text/event-stream')) {
          this.setMode('watch');
          streamed = true;
          await this.read(response.body);
        } else if (response.body) {
          await response.body.cancel();
        }
      } catch (e) {
        // Unreachable server or an aborted stream: polling goes on.
      }
      if (this.stopped) return;
      // A stream the server ended (its timeout) is opened again at once;
      // one that never opened is tried again later, polling meanwhile.
      if (!streamed) this.setMode('polling');
      await new Promise((resolve) => setTimeout(resolve, streamed ? 1000 : WATCH_RETRY_MS));
    }
  }

  // Each event (a block ending in a blank line) with data refreshes the page.
  async read(body) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, {stream: true}).replace(/\r\n?/g, '\n');
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (/^data:/m.test(block)) this.kick();
      }
      if (buffer.length > 1 << 20) buffer = '';
    }
  }
}
