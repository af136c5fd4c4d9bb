// The dashboard is a client of the /v1 API (docs/fleet-api.md): every call
// carries the signed-in token as a Bearer token, so the server's own scope
// and role checks decide what each page shows. The token lives in
// sessionStorage: it is gone when the tab closes and never sent elsewhere.

const TOKEN_KEY = 'ferry.token';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

// An answer other than 2xx, with the problem document when there is one.
export class ApiError extends Error {
  constructor(status, problem, path) {
    const detail = problem && problem.detail ? problem.detail : 'HTTP ' + status;
    super(detail);
    this.status = status;
    this.problem = problem;
    this.path = path;
  }
}

let onUnauthorized = () => {};

// Called when the server says the token is no longer good (401).
export function setUnauthorizedHandler(handler) {
  onUnauthorized = handler;
}

export function authHeaders() {
  return {Authorization: 'Bearer ' + (token() || '')};
}

// One API call; resolves to the parsed JSON (null for an empty body), rejects
// with ApiError for a non-2xx answer and with TypeError when the server is
// unreachable.
export async function api(method, path, body) {
  const headers = authHeaders();
  const init = {method, headers, cache: 'no-store', credentials: 'omit'};
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    // A kept-alive connection the server closed as it was reused (a busy
    // server gives idle ones up): a GET is safe to send once more.
    if (method !== 'GET') throw error;
    await new Promise((resolve) => setTimeout(resolve, 200));
    response = await fetch(path, init);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch (e) {
      data = null;
    }
  }
  if (!response.ok) {
    if (response.status === 401) onUnauthorized();
    throw new ApiError(response.status, data, path);
  }
  return data;
}

export function get(path) {
  return api('GET', path);
}

// A path with a query from {name: value | [values]}; empty values are left out.
export function withQuery(path, params) {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params || {})) {
    for (const v of [value].flat()) {
      if (v !== undefined && v !== null && v !== '') query.append(name, String(v));
    }
  }
  const text = query.toString();
  return text ? path + '?' + text : path;
}

// The largest page the dashboard asks for; a server configured with a
// smaller --max-page-size answers 400, and the server's default is used.
let pageSize = 500;

// Jobs matching `params` (the query of GET /v1/jobs), newest first, up to
// `limit`: {jobs, truncated}. truncated: more exist than were read.
export async function listJobs(params, limit = 2000) {
  const jobs = [];
  let pageToken = null;
  for (;;) {
    const query = Object.assign({}, params, {page_size: pageSize || undefined,
      page_token: pageToken || undefined});
    let page;
    try {
      page = await get(withQuery('/v1/jobs', query));
    } catch (e) {
      if (e instanceof ApiError && e.status === 400 && pageSize && /page_size/.test(e.message)) {
        pageSize = 0;
        continue;
      }
      throw e;
    }
    jobs.push(...page.jobs);
    pageToken = page.next_page_token;
    if (!pageToken) return {jobs, truncated: false};
    if (jobs.length >= limit) return {jobs, truncated: true};
  }
}

// What the signed-in token is: {tenant, team, user, role}.
export function whoami() {
  return get('/v1/whoami');
}

// May `me` cancel `job`? The server's rule (docs/fleet-api.md): users their
// own jobs, team admins their team's, platform admins all. The server checks
// again; this only decides whether the button is shown.
export function mayCancel(me, job) {
  if (!me) return false;
  if (me.role === 'platform_admin') return true;
  if (me.tenant !== job.tenant) return false;
  if (me.role === 'team_admin') return me.team === job.team;
  return me.role === 'user' && me.user === job.user;
}

export function isAdmin(me) {
  return !!me && me.role === 'platform_admin';
}

// The scheduler's state (GET /v1/scheduler), which only platform admins may
// read: null for anyone else, and null too when the server refuses the token
// (a role changed since sign-in).
export async function schedulerState(me) {
  if (!isAdmin(me)) return null;
  try {
    return await get('/v1/scheduler');
  } catch (error) {
    if (error instanceof ApiError && error.status === 403) return null;
    throw error;
  }
}
