// Queues: what each tenant and team uses and waits for (from the caller's
// visible jobs), quotas against their use with what is borrowed, and fair
// share (GET /v1/scheduler, platform admins), and the pending jobs with the
// reason the scheduler gave each.
import {get, listJobs, schedulerState, withQuery} from './api.js';
import {fill, h, section, table} from './dom.js';
import {ACTIVE_STATES, ago, jobGpus, owner} from './format.js';

const ACTIVE_LIMIT = 5000;
const PENDING_SHOWN = 100;
// Pending jobs whose latest reason message is read from their events.
const MESSAGES_READ = 20;

function pathMatches(quotaPath, job) {
  const parts = quotaPath.split('/');
  const mine = [job.tenant, job.team, job.user];
  return parts.every((part, i) => part === mine[i]);
}

function meter(used, limit) {
  const share = limit > 0 ? Math.min(1, used / limit) : used > 0 ? 1 : 0;
  const bar = h('span', {class: 'meter-fill' + (used > limit ? ' over' : '')});
  bar.style.width = Math.round(share * 100) + '%';
  return h('span', {class: 'meter', title: used + ' of ' + limit}, bar);
}

export function mount(main, context) {
  const me = context.me;
  const teams = h('div', {id: 'team-usage'});
  const quotas = h('div', {id: 'quotas'});
  const shares = h('div', {id: 'fair-share'});
  const pending = h('div', {id: 'pending-jobs'});
  const messages = new Map(); // job id → {after, message}

  fill(main, h('h1', null, 'Queues'),
      section('Use by tenant and team', teams),
      section('Pending jobs', pending),
      section('Quotas', quotas),
      section('Fair share', shares));

  async function reasonMessage(job) {
    const known = messages.get(job.id) || {after: 0, message: ''};
    const page = await get(withQuery('/v1/jobs/' + job.id + '/events',
        {after: known.after, limit: 1000}));
    for (const e of page.events) {
      if ((e.type === 'pending_reason' || e.reason === job.reason) && e.message) {
        known.message = e.message;
      }
    }
    known.after = page.next_after;
    messages.set(job.id, known);
    return known.message;
  }

  async function refresh() {
    const [active, gpus, sched] = await Promise.all([
      listJobs({state: ACTIVE_STATES.join(',')}, ACTIVE_LIMIT), get('/v1/gpus'),
      schedulerState(me)]);
    const jobsById = new Map(active.jobs.map((j) => [j.id, j]));

    // GPUs held, per job, by model (from the GPUs the store says each job holds).
    const held = new Map();
    for (const gpu of gpus.gpus) {
      const job = jobsById.get(gpu.job_id);
      if (!job) continue;
      const byModel = held.get(job.id) || new Map();
      const model = String(gpu.model).toLowerCase();
      byModel.set(model, (byModel.get(model) || 0) + 1);
      held.set(job.id, byModel);
    }
    const heldBy = (job, model) => {
      const byModel = held.get(job.id);
      if (!byModel) return 0;
      if (!model) return [...byModel.values()].reduce((a, b) => a + b, 0);
      return byModel.get(model.toLowerCase()) || 0;
    };

    const rows = new Map();
    for (const job of active.jobs) {
      const key = job.tenant + '/' + job.team;
      const row = rows.get(key) || {running: 0, gpus: 0, pending: 0, asked: 0};
      if (job.state === 'PENDING') {
        row.pending += 1;
        row.asked += jobGpus(job);
      } else {
        row.running += 1;
        row.gpus += heldBy(job, '');
      }
      rows.set(key, row);
    }
    const standing = new Map((sched ? sched.fair_share : []).map((s) => [s.path, s]));
    fill(teams, table(['Tenant/team', 'Running jobs', 'GPUs in use', 'Pending jobs',
      'GPUs asked by pending', 'Fair share'], [...rows.entries()].sort().map(([key, r]) => [
      key, {value: r.running, class: 'num'}, {value: r.gpus, class: 'num'},
      {value: r.pending, class: 'num'}, {value: r.asked, class: 'num'},
      standing.has(key) ? standing.get(key).fair_share.toFixed(2) : '']),
    'No job is pending or running.', {id: 'team-table'}),
    active.truncated ? h('p', {class: 'note'}, 'Counted over the newest ' + active.jobs.length +
      ' active jobs.') : null);

    if (!sched) {
      fill(quotas, h('p', {class: 'note'}, 'Quotas come from the scheduler config, which ' +
        'platform admins see (GET /v1/scheduler). Pending jobs below say when a quota holds ' +
        'them (QUOTA_EXCEEDED).'));
      fill(shares, h('p', {class: 'note'}, 'Fair-share standings are shown to platform admins.'));
    } else {
      const quotaRows = sched.config.quotas.map((q) => {
        const used = active.jobs.filter((j) => j.state !== 'PENDING' && pathMatches(q.path, j))
            .reduce((n, j) => n + heldBy(j, q.gpu_model), 0);
        const borrowed = Math.max(0, used - q.nominal_gpus);
        const unused = Math.max(0, q.nominal_gpus - used);
        const lendable = q.lending_limit === null || q.lending_limit === undefined ? unused :
          Math.min(unused, q.lending_limit);
        return {q, used, borrowed, lendable};
      });
      const cohortBorrowed = new Map();
      for (const r of quotaRows) {
        cohortBorrowed.set(r.q.cohort, (cohortBorrowed.get(r.q.cohort) || 0) + r.borrowed);
      }
      fill(quotas, table(['Path', 'Model', 'Cohort', 'Used / nominal', '', 'Borrowed',
        'Borrowing limit', 'Unused, lendable', 'Lending limit', 'Borrowed in cohort'],
      quotaRows.map(({q, used, borrowed, lendable}) => [q.path, q.gpu_model || 'all',
        q.cohort, used + ' / ' + q.nominal_gpus, meter(used, q.nominal_gpus),
        {value: borrowed, class: 'num'},
        q.borrowing_limit === null || q.borrowing_limit === undefined ? 'none' :
          String(q.borrowing_limit),
        {value: lendable, class: 'num'},
        q.lending_limit === null || q.lending_limit === undefined ? 'none' :
          String(q.lending_limit),
        {value: cohortBorrowed.get(q.cohort), class: 'num'}]),
      'No quotas are configured.', {id: 'quota-table'}),
      h('p', {class: 'note'}, 'Borrowed: GPUs in use above nominal. A cohort lends what its ' +
        'members borrow: "borrowed in cohort" is what the others lend.'));
      fill(shares, table(['Path', 'Shares', 'Use (GPU·h)', 'Fair share'],
          sched.fair_share.map((s) => [s.path, {value: s.shares, class: 'num'},
            {value: (s.usage_gpu_seconds / 3600).toFixed(2), class: 'num'},
            {value: s.fair_share.toFixed(2), class: 'num'}]),
          'No usage recorded yet.', {id: 'share-table'}));
    }

    const waiting = active.jobs.filter((j) => j.state === 'PENDING')
        .sort((a, b) => a.id - b.id);
    const shown = waiting.slice(0, PENDING_SHOWN);
    const texts = await Promise.all(shown.map((job, i) => i < MESSAGES_READ ?
      reasonMessage(job).catch(() => '') : Promise.resolve('')));
    fill(pending, table(['ID', 'Name', 'Owner', 'GPUs', 'Priority', 'Waiting', 'Reason',
      'Message'], shown.map((job, i) => [
      h('a', {href: '#/jobs/' + job.id}, String(job.id)), {value: job.name, class: 'name'},
      owner(job), {value: jobGpus(job), class: 'num'},
      {value: job.spec ? job.spec.priority : '', class: 'num'}, ago(job.created_at),
      h('code', null, job.reason), {value: texts[i], class: 'message'}]),
    'Nothing is waiting.', {id: 'pending-table'}),
    waiting.length > shown.length ? h('p', {class: 'note'}, 'and ' +
      (waiting.length - shown.length) + ' more') : null);
  }

  return {title: 'Queues', refresh};
}
