// JSON over HTTP. Cookie-authenticated mutations carry the session's CSRF token.

let csrfToken = null;

export function setCsrf(token) {
  csrfToken = token;
}

/** The session's CSRF token, for requests made without `api()` (uploads with progress). */
export function csrf() {
  return csrfToken;
}

export class ApiError extends Error {
  constructor(status, body) {
    const error = body && typeof body === "object" ? body.error : null;
    super(error?.message || `HTTP ${status}`);
    this.status = status;
    this.code = error?.code || `http_${status}`;
    this.details = error?.details || {};
  }
}

/**
 * @param {string} path
 * @param {{ method?: string, body?: unknown }} [options]
 */
export async function api(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && csrfToken) headers["X-CSRF-Token"] = csrfToken;
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw Object.assign(new ApiError(0, null), { message: err.message, code: "network" });
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (response.ok) return data;
  throw new ApiError(response.status, data);
}

export const get = (path, options = {}) => api(path, options);
export const post = (path, body = {}, options = {}) => api(path, { ...options, method: "POST", body });
export const put = (path, body = {}, options = {}) => api(path, { ...options, method: "PUT", body });
export const patch = (path, body = {}, options = {}) => api(path, { ...options, method: "PATCH", body });
