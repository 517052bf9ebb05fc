// Types of the usermem client (hand-written; the operations and the schema types are generated into
// ./operations.d.ts by scripts/gen_ts_client.py).
import type { OperationSpec, Problem, UsermemOperations } from "./operations.js";

export * from "./operations.js";

export interface ErrorInfo {
  /** The HTTP status, when the error is an HTTP answer. */
  status?: number | null;
  /** The problem+json `code` (e.g. validation_error, not_found, tenant_mismatch), else the class's code. */
  code?: string | null;
  /** The offending field, when the server (or the client's own check) names one. */
  field?: string | null;
  detail?: string | null;
  /** The whole problem+json body. */
  problem?: Problem | null;
}

/** Root of every error the client raises (mirrors usermem.errors.UsermemError). */
export declare class UsermemError extends Error {
  static code: string;
  constructor(message: string, info?: ErrorInfo);
  readonly status: number | null;
  readonly code: string;
  readonly field: string | null;
  readonly detail: string | null;
  readonly problem: Problem | null;
}
export declare class InvalidArgument extends UsermemError {}
export declare class ValidationError extends UsermemError {}
export declare class ConfigError extends UsermemError {}
export declare class StoreError extends UsermemError {}
export declare class TierUnavailable extends StoreError {}
export declare class IntegrityError extends StoreError {}
export declare class NotFound extends UsermemError {}
export declare class ConflictError extends UsermemError {}
export declare class PermissionDenied extends UsermemError {}
export declare class ProviderError extends UsermemError {}
/** 429 after the retries; `retryAfter` is the server's Retry-After in seconds. */
export declare class RateLimited extends UsermemError {
  constructor(message: string, info?: ErrorInfo & { retryAfter?: number | null });
  readonly retryAfter: number | null;
}
/** An HTTP answer that maps to no usermem error (wrong base URL, proxy, missing endpoint). */
export declare class RemoteError extends UsermemError {}

export declare const RETRY_STATUSES: readonly number[];
export declare function retryAfterSeconds(value: string | null | undefined, now?: number): number | null;
export declare function errorFrom(
  status: number,
  body: unknown,
  options?: { url?: string; retryAfter?: number | null; statusText?: string },
): UsermemError;

export interface ClientOptions {
  /** Server URL (default: USERMEM_URL). */
  url?: string;
  /** API key (default: USERMEM_API_KEY); it decides the tenant. */
  apiKey?: string;
  /** Seconds per attempt (default 30). */
  timeout?: number;
  /** How many times 429/503 are retried (default 3). */
  retries?: number;
  /** Backoff base in seconds when there is no Retry-After: backoff * 2^attempt (default 0.5). */
  backoff?: number;
  /** Cap of each wait in seconds (default 30). */
  maxWait?: number;
  /** How the client waits (tests pass a recorder). */
  sleep?: (seconds: number) => Promise<void>;
  /** A fetch implementation (default: the global fetch). */
  fetch?: typeof fetch;
}

export interface PreparedRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: string;
}

export declare class Client {
  constructor(options?: ClientOptions);
  readonly url: string;
  timeout: number;
  retries: number;
  backoff: number;
  maxWait: number;
  retryDelay(status: number, retryAfter: number | null, attempt: number): number | null;
  request<N extends keyof UsermemOperations>(name: N, params?: Parameters<UsermemOperations[N]>[0]): PreparedRequest;
  call<N extends keyof UsermemOperations>(
    name: N,
    params?: Parameters<UsermemOperations[N]>[0],
  ): ReturnType<UsermemOperations[N]>;
}
// Declaration merging: the class has one method per operation (generated).
export interface Client extends UsermemOperations {}

export type { OperationSpec };
export default Client;
