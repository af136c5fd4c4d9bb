// Overview: GPUs total, in use and free by pool and by model (/v1/pools,
// /v1/gpus, /v1/nodes), jobs by state and the queue depth (/v1/jobs), GPU
// use over time (sampled by this page while it is open, kept for the tab's
// session) and a heat map of every node's GPUs.
import {get, listJobs} from './api.js';
import {ChartBox, color} from './charts.js';
import {badge, fill, h, section, table} from './dom.js';
import {ACTIVE_STATES, JOB_STATES, count, percent, time} from './format.js';

// The chart's bars in the colours of the state badges (style.css).
const STATE_COLORS = {PENDING: '#f59e0b', ADMITTED: '#6366f1', RUNNING: '#3b82f6',
  SUCCEEDED: '#10b981', FAILED: '#ef4444', CANCELLED: '#9ca3af', TIMEOUT: '#dc2626',
  PREEMPTED: '#ec4899', LOST: '#b91c1c'};
const SAMPLES_KEY = 'ferry.samples';
const MAX_SAMPLES = 900; // 30 minutes at one sample every 2 s
const MAX_HEATMAP_NODES = 500;
// Terminal states are counted up to one page; active ones in full (up to this).
const ACTIVE_COUNT_LIMIT = 5000;

function loadSamples() {
  try {
    const samples = JSON.parse(sessionStorage.getItem(SAMPLES_KEY) || '[]');
    return Array.isArray(samples) ? samples : [];
  } catch (e) {
    return [];
  }
}

function saveSamples(samples) {
  try {
    sessionStorage.setItem(SAMPLES_KEY, JSON.stringify(samples.slice(-MAX_SAMPLES)));
  } catch (e) {
    // Storage full: the chart keeps what it has in memory.
  }
}

async function countStates() {
  const counts = {};
  const active = [];
  await Promise.all(JOB_STATES.map(async (state) => {
    const limit = ACTIVE_STATES.includes(state) ? ACTIVE_COUNT_LIMIT : 1;
    const found = await listJobs({state}, limit);
    counts[state] = {n: found.jobs.length, truncated: found.truncated};
    if (state === 'RUNNING' || state === 'ADMITTED') active.push(...found.jobs);
  }));
  return {counts, active};
}

function stat(label, value, id, note) {
  return h('div', {class: 'stat', id},
      h('div', {class: 'value'}, value), h('div', {class: 'label'}, label),
      note ? h('div', {class: 'note'}, note) : null);
}

// One row per node, one cell per GPU: free, in use (a link to the job when
// the caller may see it), on a drained node, or on a LOST node.
function heatmap(nodes, jobsById) {
  const sorted = [...nodes].sort((a, b) => a.pool.localeCompare(b.pool) ||
    a.name.localeCompare(b.name));
  const grid = h('div', {class: 'heatmap', id: 'heatmap'});
  for (const node of sorted.slice(0, MAX_HEATMAP_NODES)) {
    const unusable = node.state !== 'READY' ? 'lost' :
      node.drain || node.unavailable ? 'drained' : null;
    const row = h('div', {class: 'heat-row'},
        h('div', {class: 'heat-label', title: node.pool + ' · ' + node.state +
          (node.drain ? ' · drained' : '') + (node.unavailable ? ' · ' + node.unavailable : '')},
        node.name));
    const cells = h('div', {class: 'heat-cells'});
    for (const gpu of [...node.gpus].sort((a, b) => a.index - b.index)) {
      const base = 'GPU ' + gpu.index + ' · ' + gpu.model + ' · ' + node.name;
      if (gpu.external) {
        cells.append(h('span', {class: 'gpu busy other',
          title: base + ' · in use outside Ferry (' + node.pool + ')'}));
      } else if (gpu.allocated) {
        const job = gpu.job_id === null ? undefined : jobsById.get(gpu.job_id);
        if (job) {
          cells.append(h('a', {class: 'gpu busy', href: '#/jobs/' + job.id,
            title: base + ' · job ' + job.id + ' ' + job.name + ' (' + job.state + ')'}));
        } else {
          cells.append(h('span', {class: 'gpu busy other', title: base + ' · in use'}));
        }
      } else {
        cells.append(h('span', {class: 'gpu ' + (unusable || 'free'),
          title: base + ' · ' + (unusable === 'lost' ? 'node ' + node.state :
            unusable === 'drained' ? 'free, node drained' : 'free')}));
      }
    }
    row.append(cells);
    grid.append(row);
  }
  const legend = h('div', {class: 'legend'},
      ['free', 'busy', 'drained', 'lost'].map((kind) => h('span', null,
          h('span', {class: 'gpu ' + kind}), kind === 'busy' ? 'in use' : kind === 'lost' ?
            'node lost' : kind === 'drained' ? 'free on a drained node' : 'free')));
  const more = sorted.length > MAX_HEATMAP_NODES ?
    h('p', {class: 'note'}, 'and ' + (sorted.length - MAX_HEATMAP_NODES) + ' more nodes') : null;
  return [nodes.length ? grid : h('p', {class: 'note'}, 'No node has registered.'), more, legend];
}

function byModel(gpus, nodesByName) {
  const models = new Map();
  for (const gpu of gpus) {
    const entry = models.get(gpu.model) || {total: 0, used: 0, free: 0, unavailable: 0};
    const node = nodesByName.get(gpu.node);
    entry.total += 1;
    if (gpu.allocated || gpu.external) {
      entry.used += 1;
    } else if (node && node.state === 'READY' && !node.drain && !node.unavailable) {
      entry.free += 1;
    } else {
      entry.unavailable += 1;
    }
    models.set(gpu.model, entry);
  }
  return [...models.entries()].sort((a, b) => a[0].localeCompare(b[0]));
}

export function mount(main) {
  const stats = h('div', {class: 'stats', id: 'stats'});
  const pools = h('div', {id: 'pools'});
  const models = h('div', {id: 'models'});
  const states = h('div', {id: 'job-states'});
  const heat = h('div');
  const stateChart = new ChartBox('bar', {label: 'jobs by state',
    chart: {plugins: {legend: {display: false}}, scales: {y: {beginAtZero: true,
      ticks: {precision: 0}}}}});
  const useChart = new ChartBox('line', {label: 'GPU use over time',
    chart: {scales: {y: {beginAtZero: true, ticks: {precision: 0}}},
      elements: {point: {radius: 0}}}});
  let samples = loadSamples();

  fill(main,
      h('h1', null, 'Overview'),
      stats,
      h('div', {class: 'grid two'},
          section('GPUs by pool', pools),
          section('GPUs by model', models)),
      h('div', {class: 'grid two'},
          section('Jobs by state', stateChart.element, states),
          section('GPU use over time', useChart.element,
              h('p', {class: 'note'}, 'Sampled by this page every refresh while it is open.'))),
      section('Fleet heat map', heat));

  async function refresh() {
    const [poolList, gpuList, nodeList, jobs] = await Promise.all([
      get('/v1/pools'), get('/v1/gpus'), get('/v1/nodes'), countStates()]);
    const nodesByName = new Map(nodeList.nodes.map((n) => [n.name, n]));
    const jobsById = new Map(jobs.active.map((j) => [j.id, j]));
    const total = gpuList.gpus.length;
    const used = gpuList.gpus.filter((g) => g.allocated || g.external).length;
    const free = byModel(gpuList.gpus, nodesByName).reduce((n, [, m]) => n + m.free, 0);
    const ready = nodeList.nodes.filter((n) => n.state === 'READY').length;
    const pending = jobs.counts.PENDING;
    const running = jobs.counts.RUNNING;

    fill(stats,
        stat('GPUs', total, 'stat-gpus'),
        stat('in use', used, 'stat-used', percent(used, total)),
        stat('free', free, 'stat-free'),
        stat('nodes ready', ready + ' / ' + nodeList.nodes.length, 'stat-nodes'),
        stat('pending jobs (queue depth)', count(pending.n, pending.truncated), 'stat-pending'),
        stat('running jobs', count(running.n, running.truncated), 'stat-running'));

    fill(pools, table(['Pool', 'Nodes ready', 'GPUs', 'In use', 'Free', 'Models'],
        poolList.pools.map((p) => [p.name, p.nodes_ready + ' / ' + p.nodes,
          {value: p.gpus, class: 'num'}, {value: p.gpus - p.gpus_free, class: 'num'},
          {value: p.gpus_free, class: 'num'},
          Object.entries(p.gpus_by_model || {}).map(([m, n]) => n + ' × ' + m).join(', ')]),
        'no pools yet'));

    fill(models, table(['Model', 'GPUs', 'In use', 'Free', 'Unavailable'],
        byModel(gpuList.gpus, nodesByName).map(([model, m]) => [model,
          {value: m.total, class: 'num'}, {value: m.used, class: 'num'},
          {value: m.free, class: 'num'},
          {value: m.unavailable, class: 'num', title: 'free GPUs on drained or lost nodes'}]),
        'no GPUs registered'));

    fill(states, h('ul', {class: 'state-counts'}, JOB_STATES.map((s) => h('li',
        {dataset: {state: s}}, badge(s), h('span', {class: 'n'},
            count(jobs.counts[s].n, jobs.counts[s].truncated))))));
    stateChart.update(JOB_STATES, [{label: 'jobs',
      data: JOB_STATES.map((s) => jobs.counts[s].n),
      backgroundColor: JOB_STATES.map((s) => STATE_COLORS[s])}]);

    samples.push({t: Date.now(), used, total, pending: pending.n});
    samples = samples.slice(-MAX_SAMPLES);
    saveSamples(samples);
    useChart.update(samples.map((s) => time(new Date(s.t).toISOString())), [
      {label: 'GPUs in use', data: samples.map((s) => s.used), borderColor: color(0),
        backgroundColor: color(0), tension: 0.2},
      {label: 'GPUs total', data: samples.map((s) => s.total), borderColor: color(5),
        backgroundColor: color(5), borderDash: [4, 4]},
      {label: 'pending jobs', data: samples.map((s) => s.pending), borderColor: color(1),
        backgroundColor: color(1), tension: 0.2},
    ]);

    fill(heat, heatmap(nodeList.nodes, jobsById));
  }

  return {
    title: 'Overview',
    refresh,
    unmount() {
      stateChart.destroy();
      useChart.destroy();
    },
  };
}
