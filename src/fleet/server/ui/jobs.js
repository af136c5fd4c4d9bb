// Jobs: the caller's visible jobs (GET /v1/jobs, scoped by the server),
// filtered by state, user, team and label on the server and by name here.
import {listJobs} from './api.js';
import {badge, fill, h, table} from './dom.js';
import {ACTIVE_STATES, JOB_STATES, ago, duration, jobGpus, owner} from './format.js';

const LIMIT = 200;

// The filter outlives the page, so going back to the list keeps it.
const filter = {state: '', user: '', team: '', label: '', name: ''};

function serverQuery() {
  const query = {};
  if (filter.state === 'active') {
    query.state = ACTIVE_STATES.join(',');
  } else if (filter.state) {
    query.state = filter.state;
  }
  if (filter.user) query.user = filter.user;
  if (filter.team) query.team = filter.team;
  if (filter.label) query.label = filter.label;
  return query;
}

function ranFor(job) {
  if (!job.started_at) return '';
  const end = job.finished_at ? Date.parse(job.finished_at) : Date.now();
  return duration(end - Date.parse(job.started_at));
}

export function jobRow(job) {
  return [h('a', {href: '#/jobs/' + job.id, class: 'job-link'}, String(job.id)),
    {value: job.name, class: 'name'}, badge(job.state), job.reason, owner(job),
    {value: jobGpus(job), class: 'num'}, ago(job.created_at), ranFor(job)];
}

export const JOB_COLUMNS = ['ID', 'Name', 'State', 'Reason', 'Owner', 'GPUs', 'Submitted',
  'Ran for'];

export function mount(main, context) {
  const input = (name, placeholder) => h('input', {name, id: 'filter-' + name, placeholder,
    value: filter[name], autocomplete: 'off'});
  const state = h('select', {name: 'state', id: 'filter-state'},
      h('option', {value: ''}, 'any state'), h('option', {value: 'active'}, 'active'),
      JOB_STATES.map((s) => h('option', {value: s}, s)));
  state.value = filter.state;
  const fields = {state, user: input('user', 'user'), team: input('team', 'team'),
    label: input('label', 'label key=value'), name: input('name', 'name contains')};
  const form = h('form', {class: 'filters', id: 'job-filter', onsubmit: (e) => {
    e.preventDefault();
    apply();
  }}, Object.values(fields), h('button', {type: 'submit'}, 'Filter'));
  state.addEventListener('change', () => apply());
  const list = h('div', {id: 'job-list'});
  const note = h('p', {class: 'note', id: 'job-count'});

  function apply() {
    for (const [name, field] of Object.entries(fields)) filter[name] = field.value.trim();
    context.kick();
  }

  fill(main, h('h1', null, 'Jobs'), form, note, list);

  async function refresh() {
    const query = serverQuery();
    const found = await listJobs(query, LIMIT);
    const needle = filter.name.toLowerCase();
    const jobs = needle ? found.jobs.filter((j) => j.name.toLowerCase().includes(needle)) :
      found.jobs;
    fill(note, (found.truncated ? 'The newest ' + found.jobs.length + ' matching jobs' :
      found.jobs.length + ' matching jobs') + (needle ? ', ' + jobs.length +
      ' with the name filter' : ''));
    fill(list, table(JOB_COLUMNS, jobs.map(jobRow), 'No job matches.', {id: 'jobs-table'}));
  }

  return {
    title: 'Jobs',
    refresh,
  };
}
