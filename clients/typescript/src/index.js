// usermem TypeScript/JavaScript client: ESM, no dependencies (the global fetch of Node >= 18).
// The methods come from the generated table in ./operations.js (scripts/gen_ts_client.py), one per catalogue
// operation with an HTTP route; this file only sends them, maps errors and retries 429/503.
import { OPERATIONS } from "./operations.js";

export { OPERATIONS };

// -- errors: one root, mirroring usermem.errors and the Python client (usermem.interfaces.client_calls) -------

/** Root of every error the client raises. `code`, `status`, `field`, `detail` come from the problem+json body. */
export class UsermemError extends Error {
  static code = "usermem_error";

  constructor(message, { status = null, code = null, field = null, detail = null, problem = null } = {}) {
    super(message);
    this.name = new.target.name;
    this.status = status;
    this.code = code ?? new.target.code;
    this.field = field;
    this.detail = detail;
    this.problem = problem;
  }
}
export class InvalidArgument extends UsermemError { static code = "invalid_argument"; }
export class ValidationError extends UsermemError { static code = "validation_error"; }
export class ConfigError extends UsermemError { static code = "config_error"; }
export class StoreError extends UsermemError { static code = "store_error"; }
export class TierUnavailable extends StoreError { static code = "tier_unavailable"; }
export class IntegrityError extends StoreError { static code = "integrity_error"; }
export class NotFound extends UsermemError { static code = "not_found"; }
export class ConflictError extends UsermemError { static code = "conflict"; }
export class PermissionDenied extends UsermemError { static code = "permission_denied"; }
export class ProviderError extends UsermemError { static code = "provider_error"; }

/** The server refused the request under its rate limit (after the retries); retry after `retryAfter` seconds. */
export class RateLimited extends UsermemError {
  static code = "rate_limited";

  constructor(message, { retryAfter = null, ...rest } = {}) {
    super(message, rest);
    this.retryAfter = retryAfter;
  }
}

/** An HTTP answer that maps to no usermem error (a wrong base URL, a proxy, a missing endpoint). */
export class RemoteError extends UsermemError { static code = "remote_error"; }

const BY_CODE = Object.fromEntries(
  [ValidationError, InvalidArgument, NotFound, ConflictError, PermissionDenied, StoreError, TierUnavailable,
    IntegrityError, ProviderError, ConfigError].map((cls) => [cls.code, cls]),
);
const BY_STATUS = {
  401: PermissionDenied, 403: PermissionDenied, 404: NotFound, 409: ConflictError, 413: ValidationError,
  422: ValidationError, 429: TierUnavailable, 502: ProviderError, 503: StoreError,
};
export const RETRY_STATUSES = Object.freeze([429, 503]);

/** Seconds from a Retry-After header (delta-seconds or an HTTP date), or null. */
export function retryAfterSeconds(value, now = Date.now()) {
  if (value == null || value === "") return null;
  const trimmed = String(value).trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Math.max(0, Number(trimmed));
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? null : Math.max(0, (at - now) / 1000);
}

/** The error of a final (non-retried) HTTP answer, from its problem+json body. */
export function errorFrom(status, body, { url = "", retryAfter = null, statusText = "" } = {}) {
  const problem = body && typeof body === "object" && !Array.isArray(body) ? body : null;
  const code = typeof problem?.code === "string" ? problem.code : null;
  const detail = (problem?.detail ?? problem?.title ?? statusText) || `HTTP ${status}`;
  const field = typeof problem?.field === "string" ? problem.field : null;
  const info = { status, code, field, detail, problem };
  if (status === 429) return new RateLimited(`rate limited: ${detail}`, { ...info, retryAfter });
  if (status === 401 || status === 403) return new PermissionDenied(`${code ?? status}: ${detail}`, info);
  const dataAbsent = code === "not_found" || (code !== null && code.endsWith("_not_found") && code !== "route_not_found");
  if (status === 404 && !dataAbsent) {
    return new RemoteError(`HTTP 404 from ${url}: no such endpoint (is this a usermem server of this version?)`, info);
  }
  const cls = (code !== null && BY_CODE[code]) || BY_STATUS[status];
  if (cls) return new cls(String(detail), info);
  return new RemoteError(`HTTP ${status} ${code ?? ""}: ${detail}`.replace(/\s+:/, ":"), info);
}

// -- the client -------------------------------------------------------------------------------------------------

const env = (name) => (typeof process !== "undefined" && process.env ? process.env[name] : undefined);
const defaultSleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

function segment(value, field) {
  if (typeof value !== "string") {
    throw new InvalidArgument(`${field} must be a string, got ${value === null ? "null" : typeof value}`, { field });
  }
  if (!value.trim()) throw new ValidationError("must not be empty", { field, detail: "must not be empty" });
  return encodeURIComponent(value);
}

function fieldsOrLevel(value) {
  if (typeof value === "string" && ["L1", "L2", "L3"].includes(value.toUpperCase())) {
    return { level: value.toUpperCase() };
  }
  return { fields: typeof value === "string" ? [value] : Array.from(value) };
}

// What a 404 "no such user/key" answers for the operations where the embedded engine answers "empty" (the
// Python client's `absent`): the empty result, with the path's identifiers the schema requires.
function absentResult(spec, params) {
  if (spec.absent === null || typeof spec.absent !== "object") return spec.absent;
  const ids = {};
  for (const [pname, where] of Object.entries(spec.params)) if (where.in === "path") ids[pname] = params[pname];
  return { ...ids, ...structuredClone(spec.absent) };
}

/**
 * HTTP client with the operations of usermem's `Memory` / Python `Client` (camelCase names; one object of the
 * operation's snake_case parameters). The API key decides the tenant.
 */
export class Client {
  constructor({ url, apiKey, timeout = 30, retries = 3, backoff = 0.5, maxWait = 30, sleep = defaultSleep,
    fetch: fetchImpl } = {}) {
    url = url ?? env("USERMEM_URL");
    apiKey = apiKey ?? env("USERMEM_API_KEY");
    if (!url) throw new ConfigError("no server URL: pass url or set USERMEM_URL");
    if (!apiKey) throw new ConfigError("no API key: pass apiKey or set USERMEM_API_KEY");
    this.url = String(url).replace(/\/+$/, "");
    this.timeout = timeout;
    this.retries = retries;
    this.backoff = backoff;
    this.maxWait = maxWait;
    this._sleep = sleep;
    this._fetch = fetchImpl ?? globalThis.fetch;
    if (typeof this._fetch !== "function") throw new ConfigError("no fetch: Node >= 18 (or pass fetch)");
    Object.defineProperty(this, "_apiKey", { value: apiKey, enumerable: false });
  }

  /** Seconds to wait before retrying this answer, or null when it is final. */
  retryDelay(status, retryAfter, attempt) {
    if (!RETRY_STATUSES.includes(status) || attempt >= this.retries) return null;
    const wait = retryAfter ?? this.backoff * 2 ** attempt;
    return Math.min(wait, this.maxWait);
  }

  /** Build the request of an operation from its table entry and parameters (no I/O). */
  request(name, params = {}) {
    const spec = OPERATIONS[name];
    if (!spec) throw new InvalidArgument(`no such operation: ${name}`);
    if (params === null || typeof params !== "object" || Array.isArray(params)) {
      throw new InvalidArgument(`${name} takes one object of parameters`);
    }
    for (const k of Object.keys(params)) {
      if (!(k in spec.params) && !(k === "tenant" && spec.tenant)) {
        throw new InvalidArgument(`${name} has no parameter ${k}`, { field: k });
      }
    }
    const query = new URLSearchParams();
    let body = null;
    let path = spec.path;
    for (const [pname, where] of Object.entries(spec.params)) {
      const value = params[pname];
      if (where.in === "path") {
        path = path.replace(`{${pname}}`, segment(value, pname));
        continue;
      }
      if (where.in === "whole") {
        if (value === null || typeof value !== "object") throw new InvalidArgument(`${pname} must be an object`);
        body = { ...(body ?? {}), ...value };
        continue;
      }
      if (value === undefined) continue;
      if (where.in === "query") {
        if (value === null) continue;
        for (const v of Array.isArray(value) ? value : [value]) query.append(where.wire, String(v));
      } else if (where.in === "fields_or_level") {
        body = { ...(body ?? {}), ...fieldsOrLevel(value) };
      } else {
        body = { ...(body ?? {}), [where.wire]: value };
      }
    }
    for (const [pathParam, [source, attr]] of Object.entries(spec.path_from)) {
      const value = params[source]?.[attr];
      path = path.replace(`{${pathParam}}`, segment(value, attr));
    }
    const headers = { Authorization: `Bearer ${this._apiKey}`, "User-Agent": "usermem-client-ts",
      Accept: "application/json" };
    if (spec.tenant && params.tenant !== undefined && params.tenant !== null) {
      segment(params.tenant, "tenant");
      headers["X-Usermem-Tenant"] = params.tenant;
    }
    if (spec.method !== "GET" && spec.method !== "DELETE") {
      headers["Content-Type"] = "application/json";
      body = body ?? {};
    }
    const qs = query.toString();
    return { method: spec.method, url: `${this.url}${path}${qs ? `?${qs}` : ""}`, headers,
      body: body === null ? undefined : JSON.stringify(body) };
  }

  /** Send one operation (retrying 429/503) and decode its answer. */
  async call(name, params = {}) {
    const spec = OPERATIONS[name];
    const req = this.request(name, params);
    for (let attempt = 0; ; attempt += 1) {
      let resp;
      try {
        resp = await this._fetch(req.url, { method: req.method, headers: req.headers, body: req.body,
          signal: AbortSignal.timeout(this.timeout * 1000) });
      } catch (exc) {
        const timedOut = exc?.name === "TimeoutError" || exc?.name === "AbortError";
        throw new StoreError(timedOut ? `usermem server at ${this.url} timed out`
          : `cannot reach usermem server at ${this.url}: ${exc?.cause?.message ?? exc?.message ?? exc}`);
      }
      const text = await resp.text();
      let data = null;
      try {
        data = text ? JSON.parse(text) : null;
      } catch {
        data = null;
      }
      if (resp.status < 400) {
        if (spec.records && data && Array.isArray(data.items)) {
          return { ...data, items: data.items.map((s) => s.memory), withheld: data.withheld ?? [] };
        }
        return data;
      }
      const retryAfter = retryAfterSeconds(resp.headers.get("Retry-After"));
      const wait = this.retryDelay(resp.status, retryAfter, attempt);
      if (wait !== null) {
        await this._sleep(wait);
        continue;
      }
      const err = errorFrom(resp.status, data, { url: req.url, retryAfter, statusText: resp.statusText });
      if (err instanceof NotFound && "absent" in spec) return absentResult(spec, params);
      throw err;
    }
  }
}

for (const name of Object.keys(OPERATIONS)) {
  Object.defineProperty(Client.prototype, name, {
    value: function operation(params) {
      return this.call(name, params ?? {});
    },
    writable: true,
    configurable: true,
  });
}

export default Client;
