// One job: its state and why (the API's reason, the message of the latest
// pending-reason or preemption event, and the explanation fields of GET
// /v1/jobs/{id} when the server sends them), the timeline from its events,
// placement, attempts, a live tail of its logs, and Cancel when the
// caller's role allows it. A job the caller may not see is "not found",
// exactly as the API answers.
import {ApiError, api, get, mayCancel, withQuery} from './api.js';
import {badge, facts, fill, h, section, table} from './dom.js';
import {duration, isTerminal, jobGpus, labels, owner, time} from './format.js';

const MAX_LOG_CHUNKS = 5000;
const EXPLANATION_FIELDS = [['explanation', 'Explanation'], ['pending', 'Why it is pending'],
  ['preemption', 'Preemption']];

// Any JSON value as nested lists, every string as text.
function renderValue(value, depth = 0) {
  if (value === null || value === undefined) return h('span', {class: 'note'}, '–');
  if (typeof value !== 'object') return String(value);
  if (depth > 6) return JSON.stringify(value);
  if (Array.isArray(value)) {
    if (value.length === 0) return h('span', {class: 'note'}, 'none');
    return h('ul', {class: 'plain'}, value.map((v) => h('li', null, renderValue(v, depth + 1))));
  }
  const list = h('dl', {class: 'facts nested'});
  for (const [key, v] of Object.entries(value)) {
    list.append(h('dt', null, key.replace(/_/g, ' ')), h('dd', null, renderValue(v, depth + 1)));
  }
  return list;
}

function placementText(placement) {
  return (placement || []).map((p) => 'task ' + p.task + ' on ' + p.node + ' GPUs ' +
    (p.gpu_indices.length ? p.gpu_indices.join(',') : 'none')).join('; ');
}

// The latest event that explains the current state: a pending reason while
// the job waits, a preemption request while it is being preempted.
function latestReasonEvent(job, events) {
  for (let i = events.length - 1; i >= 0; --i) {
    const e = events[i];
    if (job.state === 'PENDING' && (e.type === 'pending_reason' ||
        (e.reason === job.reason && e.message))) {
      return e;
    }
    if (e.type === 'preempt_requested' && !isTerminal(job.state)) return e;
    if (e.type === 'state' && e.state === job.state) return e.message ? e : null;
  }
  return null;
}

// A bar of the job's states over time, from its state events.
function stateBar(job, events) {
  const changes = events.filter((e) => e.type === 'state' && e.state);
  if (changes.length === 0) return null;
  const start = Date.parse(job.created_at);
  const end = isTerminal(job.state) && job.finished_at ? Date.parse(job.finished_at) : Date.now();
  const span = Math.max(1, end - start);
  const bar = h('div', {class: 'state-bar', id: 'state-bar'});
  let previous = {state: 'PENDING', at: start};
  const segments = [];
  for (const e of changes) {
    const at = Date.parse(e.at);
    segments.push({state: previous.state, from: previous.at, to: at});
    previous = {state: e.state, at};
  }
  segments.push({state: previous.state, from: previous.at, to: end});
  for (const s of segments) {
    const width = Math.max(0, ((s.to - s.from) / span) * 100);
    if (width <= 0 && !(isTerminal(s.state) && s === segments[segments.length - 1])) continue;
    const piece = h('span', {class: 'segment state-' + s.state.toLowerCase(),
      title: s.state + ' · ' + duration(s.to - s.from)}, width > 8 ? s.state : '');
    piece.style.flexGrow = String(Math.max(width, 0.5));
    bar.append(piece);
  }
  return bar;
}

export function mount(main, context) {
  const id = context.params.id;
  const me = context.me;
  const head = h('div', {id: 'job-head'});
  const why = h('div', {id: 'job-why'});
  const details = h('div', {id: 'job-details'});
  const placement = h('div', {id: 'job-placement'});
  const attempts = h('div', {id: 'job-attempts'});
  const timeline = h('div', {id: 'job-timeline'});
  const logBox = h('pre', {class: 'logs', id: 'job-logs'});
  const logNote = h('p', {class: 'note', id: 'job-log-note'});
  const actions = h('div', {class: 'actions', id: 'job-actions'});
  const body = h('div', {class: 'job-body'},
      section('Why', why),
      h('div', {class: 'grid two'}, section('Details', details), section('Placement', placement,
          attempts)),
      section('Timeline', timeline),
      section('Logs', logNote, logBox));
  let events = [];
  let eventsAfter = 0;
  let logsAfter = 0;
  let logChunks = 0;
  let confirming = false;
  let missing = false;

  fill(main, head, actions, body);
  if (!/^[0-9]+$/.test(id)) {
    showMissing();
    return {title: 'Job', refresh: async () => {}};
  }

  function showMissing() {
    missing = true;
    fill(head, h('h1', null, 'Job ' + id));
    fill(actions);
    fill(body, h('p', {class: 'not-found', id: 'job-not-found'},
        'Job ' + id + ' was not found. It does not exist, or it belongs to another tenant.'),
    h('p', null, h('a', {href: '#/jobs'}, 'Back to the jobs')));
  }

  async function cancel() {
    try {
      const job = await api('POST', '/v1/jobs/' + id + ':cancel');
      confirming = false;
      renderJob(job);
    } catch (error) {
      fill(actions, h('span', {class: 'error'}, 'Cancel failed: ' + error.message));
      return;
    }
    context.kick();
  }

  function renderActions(job) {
    if (!mayCancel(me, job) || isTerminal(job.state)) {
      fill(actions);
      return;
    }
    if (confirming) {
      fill(actions, h('span', null, 'Cancel job ' + job.id + '? '),
          h('button', {type: 'button', class: 'danger', id: 'confirm-cancel', onclick: cancel},
              'Yes, cancel it'),
          h('button', {type: 'button', id: 'keep-job', onclick: () => {
            confirming = false;
            renderActions(job);
          }}, 'Keep it'));
    } else {
      fill(actions, h('button', {type: 'button', class: 'danger', id: 'cancel-job', onclick: () => {
        confirming = true;
        renderActions(job);
      }}, 'Cancel job'));
    }
  }

  function renderJob(job) {
    const spec = job.spec || {};
    fill(head, h('h1', null, h('span', null, 'Job ' + job.id + ' · '),
        h('span', {class: 'name', id: 'job-name'}, job.name)),
    h('p', {class: 'state-line'}, badge(job.state), ' ',
        h('span', {id: 'job-reason', class: 'reason'}, job.reason),
        job.attempt > 1 ? h('span', {class: 'note'}, ' · attempt ' + job.attempt) : null));
    renderActions(job);

    const reasonEvent = latestReasonEvent(job, events);
    const explained = EXPLANATION_FIELDS.filter(([field]) => job[field] !== undefined &&
      job[field] !== null);
    fill(why,
        h('p', {class: 'why-line'}, h('strong', null, job.state), ' · ',
            h('code', null, job.reason), reasonEvent && reasonEvent.message ?
              [' — ', h('span', {id: 'job-message'}, reasonEvent.message)] : null),
        explained.map(([field, title]) => h('div', {class: 'explanation', id: 'job-' + field},
            h('h3', null, title), renderValue(job[field]))),
        !reasonEvent && explained.length === 0 ?
          h('p', {class: 'note'}, 'The reason code is all the server has said so far.') : null);

    fill(details, facts([
      ['Owner', owner(job)],
      ['Command', spec.command ? spec.command.join(' ') : spec.dataflow ?
        'dataflow ' + spec.dataflow : ''],
      ['Gang', (spec.tasks || 1) + ' task(s) × ' + (spec.gpus_per_task || 0) + ' GPU(s) = ' +
        jobGpus(job) + ' GPUs'],
      ['GPU models', (spec.gpu_models || []).join(', ') || 'any'],
      ['Priority', String(spec.priority ?? 0) + (spec.preemptible ? ', preemptible' : '')],
      ['Labels', labels(spec.labels)],
      ['Pool set', spec.pool_set],
      ['Topology', spec.topology],
      ['Max runtime', spec.max_runtime_seconds ? duration(spec.max_runtime_seconds * 1000) : ''],
      ['Submitted', time(job.created_at)],
      ['Admitted', time(job.admitted_at)],
      ['Started', time(job.started_at)],
      ['Finished', time(job.finished_at)],
      ['Exit code', job.exit_code === null || job.exit_code === undefined ? '' :
        String(job.exit_code)],
    ]));

    fill(placement, table(['Task', 'Node', 'GPUs'], (job.placement || []).map((p) => [
      {value: p.task, class: 'num'}, p.node, p.gpu_indices.join(', ')]),
    'not placed', {id: 'placement-table'}));
    fill(attempts, h('h3', null, 'Attempts'), table(['#', 'State', 'Reason', 'Started', 'Ended',
      'Exit', 'Placement'], (job.attempts || []).map((a) => [{value: a.attempt, class: 'num'},
      badge(a.state), a.reason, time(a.started_at || a.admitted_at), time(a.ended_at),
      a.exit_code === null || a.exit_code === undefined ? '' : String(a.exit_code),
      placementText(a.placement)]), 'none yet', {id: 'attempts-table'}));

    fill(timeline, stateBar(job, events), table(['Time', 'Event', 'State', 'Reason', 'Message',
      'By'], events.map((e) => [time(e.at), e.type, e.state ? badge(e.state) : '', e.reason,
      {value: e.message, class: 'message'}, e.actor]), 'no events yet', {id: 'events-table'}));
  }

  async function readEvents() {
    for (let round = 0; round < 20; ++round) {
      const page = await get(withQuery('/v1/jobs/' + id + '/events',
          {after: eventsAfter, limit: 1000}));
      events.push(...page.events);
      eventsAfter = page.next_after;
      if (page.events.length < 1000) return;
    }
  }

  async function readLogs() {
    for (let round = 0; round < 10; ++round) {
      const page = await get(withQuery('/v1/jobs/' + id + '/logs',
          {after: logsAfter, limit: 1000}));
      const atBottom = logBox.scrollTop + logBox.clientHeight >= logBox.scrollHeight - 4;
      for (const chunk of page.chunks) {
        const line = h('span', {class: 'chunk ' + chunk.stream,
          title: 'task ' + chunk.task + ' · attempt ' + chunk.attempt + ' · ' + chunk.stream +
            ' · ' + time(chunk.at)}, chunk.data);
        logBox.append(line);
        ++logChunks;
      }
      while (logChunks > MAX_LOG_CHUNKS && logBox.firstChild) {
        logBox.firstChild.remove();
        --logChunks;
      }
      if (page.chunks.length && atBottom) logBox.scrollTop = logBox.scrollHeight;
      logsAfter = page.next_after;
      fill(logNote, page.finished ? 'The job has ended; this is all of its output.' :
        logChunks ? 'Following the output as it arrives.' : 'No output yet.');
      if (page.chunks.length < 1000) return;
    }
  }

  async function refresh() {
    if (missing) return;
    let job;
    try {
      job = await get('/v1/jobs/' + id);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) {
        showMissing();
        return;
      }
      throw error;
    }
    await Promise.all([readEvents(), readLogs()]);
    renderJob(job);
  }

  // The log tail has no watch events: this page polls every 2 s throughout.
  return {title: 'Job ' + id, refresh, steady: true};
}
