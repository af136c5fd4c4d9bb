// Nodes and pools: every node's state, GPUs, input cache and lease (GET /v1/nodes), the
// pools (GET /v1/pools), drain and undrain for platform admins, and for them
// too the providers with their circuit breakers and the scheduler's recent
// cycles (GET /v1/scheduler; the page keeps the cycles it has seen).
import {api, get, isAdmin, schedulerState} from './api.js';
import {badge, facts, fill, h, section, table} from './dom.js';
import {ago, bytes, labels, time} from './format.js';

const CYCLES_KEPT = 20;
// The cycles seen while the dashboard is open, newest first.
const cycles = [];

function gpuSummary(node) {
  const models = new Map();
  for (const gpu of node.gpus) models.set(gpu.model, (models.get(gpu.model) || 0) + 1);
  return [...models.entries()].map(([m, n]) => n + ' × ' + m).join(', ') || 'none';
}

// The node's input cache as its agent last reported it: bytes / quota, with
// the inputs it holds (those the viewer may see) in the tooltip.
function cacheCells(node) {
  const cache = node.cache;
  if (!cache) return [{value: '–', class: 'num'}, {value: '–', class: 'num'}];
  const held = (cache.inputs || []).map((i) => i.tenant + ' ' + i.digest.slice(0, 19) + '… ' +
    bytes(i.bytes) + ' / ' + bytes(i.total_bytes));
  const ratio = cache.hit_ratio === null || cache.hit_ratio === undefined ? '–' :
    Math.round(100 * cache.hit_ratio) + ' %';
  return [{value: bytes(cache.bytes) + ' / ' + bytes(cache.quota_bytes), class: 'num cache',
    title: cache.entries + ' entries' + (held.length ? '\n' + held.join('\n') : '')},
  {value: ratio, class: 'num'}];
}

export function mount(main, context) {
  const me = context.me;
  const admin = isAdmin(me);
  const nodes = h('div', {id: 'nodes'});
  const pools = h('div', {id: 'pools'});
  const providers = h('div', {id: 'providers'});
  const scheduler = h('div', {id: 'scheduler'});
  const message = h('p', {class: 'message', id: 'node-message', role: 'alert'});

  fill(main, h('h1', null, 'Nodes & pools'), message,
      section('Nodes', nodes),
      section('Pools', pools),
      h('div', {class: 'grid two'}, section('Providers', providers),
          section('Scheduler', scheduler)));

  async function setDrain(node, drain) {
    try {
      await api('POST', '/v1/nodes/' + encodeURIComponent(node.name) +
        (drain ? ':drain' : ':undrain'));
      fill(message, (drain ? 'Drained ' : 'Undrained ') + node.name + '.');
    } catch (error) {
      fill(message, 'Could not ' + (drain ? 'drain ' : 'undrain ') + node.name + ': ' +
        error.message);
    }
    context.kick();
  }

  function nodeRow(node) {
    const inUse = node.gpus.filter((g) => g.allocated || g.external).length;
    const row = [node.name, node.pool, badge(node.state),
      [node.drain ? 'drained' : '', node.unavailable].filter(Boolean).join(' · '),
      gpuSummary(node), {value: inUse + ' / ' + node.gpus.length, class: 'num'},
      {value: node.cpus, class: 'num'}, {value: Math.round(node.memory_mb / 1024) + ' GiB',
        class: 'num'}, ...cacheCells(node), labels(node.labels), ago(node.last_heartbeat),
      time(node.lease_expires_at)];
    if (admin) {
      row.push(h('button', {type: 'button', class: node.drain ? '' : 'danger',
        dataset: {node: node.name, action: node.drain ? 'undrain' : 'drain'},
        onclick: () => setDrain(node, !node.drain)}, node.drain ? 'Undrain' : 'Drain'));
    }
    return row;
  }

  async function refresh() {
    const [nodeList, poolList, sched] = await Promise.all([get('/v1/nodes'), get('/v1/pools'),
      schedulerState(me)]);
    const columns = ['Node', 'Pool', 'State', 'Drain', 'GPUs', 'In use', 'CPUs', 'Memory',
      'Cache', 'Cache hits', 'Labels', 'Last heartbeat', 'Lease until'];
    if (admin) columns.push('');
    fill(nodes, table(columns, [...nodeList.nodes].sort((a, b) => a.name.localeCompare(b.name))
        .map(nodeRow), 'No node has registered.', {id: 'nodes-table'}));
    fill(pools, table(['Pool', 'Nodes', 'Ready', 'GPUs', 'Free', 'Models'],
        poolList.pools.map((p) => [p.name, {value: p.nodes, class: 'num'},
          {value: p.nodes_ready, class: 'num'}, {value: p.gpus, class: 'num'},
          {value: p.gpus_free, class: 'num'},
          Object.entries(p.gpus_by_model || {}).map(([m, n]) => n + ' × ' + m).join(', ')]),
        'No pools yet.', {id: 'pools-table'}));

    if (!sched) {
      const note = 'Shown to platform admins (GET /v1/scheduler).';
      fill(providers, h('p', {class: 'note'}, note));
      fill(scheduler, h('p', {class: 'note'}, note));
      return;
    }
    const provisioning = Object.entries(sched.provisioning || {});
    fill(providers, table(['Provider', 'Type', 'Breaker', 'Calls', 'Retries', 'Failures',
      'Breaker opens', 'Nodes', 'Last error'], (sched.providers || []).map((p) => [p.name,
      p.type, h('span', {class: 'badge breaker-' + String(p.breaker).replace('_', '-')},
          p.breaker), {value: p.calls, class: 'num'}, {value: p.retries, class: 'num'},
      {value: p.failures, class: 'num'}, {value: p.breaker_opens, class: 'num'},
      {value: (p.nodes || []).length, class: 'num'}, {value: p.last_error || '',
        class: 'message'}]), 'No cloud or local provider is configured.',
    {id: 'providers-table'}),
    provisioning.length ? h('p', {class: 'note'}, 'Nodes on their way: ' +
      provisioning.map(([pool, n]) => pool + ' ' + n).join(', ')) : null);

    const last = sched.last_cycle;
    if (last && last.at && (cycles.length === 0 || cycles[0].at !== last.at)) {
      cycles.unshift(last);
      cycles.length = Math.min(cycles.length, CYCLES_KEPT);
    }
    const config = sched.config || {};
    fill(scheduler, facts([
      ['Ordering', config.ordering],
      ['Default scoring', config.default_scoring],
      ['Config file', sched.config_file || 'none (built-in defaults)'],
      ['Loaded', time(sched.config_loaded_at)],
      ['Config error', sched.config_error],
      ['Preemptions', String(sched.preemptions_total)],
    ]), h('h3', null, 'Recent cycles'), table(['At', 'Pending', 'Considered', 'Placed',
      'Backfilled', 'Preempted', 'ms'], cycles.map((c) => [time(c.at),
      {value: c.pending, class: 'num'}, {value: c.considered, class: 'num'},
      {value: c.placed, class: 'num'}, {value: c.backfilled, class: 'num'},
      {value: c.preempted, class: 'num'}, {value: Number(c.elapsed_ms).toFixed(2),
        class: 'num'}]), 'no cycle yet', {id: 'cycles-table'}));
  }

  return {title: 'Nodes & pools', refresh};
}
