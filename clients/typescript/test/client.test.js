// node --test: the client against a live `usermem serve` (USERMEM_URL, USERMEM_API_KEY: an admin key of tenant
// "local"; USERMEM_TEST_OTHER_KEY: a key of another tenant), started by tests/test_ts_client.py. Without them the
// live tests are skipped (the pytest wrapper fails on any skip). The retry tests use a loopback server of their own.
import assert from "node:assert/strict";
import http from "node:http";
import { describe, test } from "node:test";

import {
  Client, ConfigError, InvalidArgument, NotFound, OPERATIONS, PermissionDenied, RateLimited, RemoteError,
  StoreError, UsermemError, ValidationError, errorFrom, retryAfterSeconds,
} from "../src/index.js";

const URL_ = process.env.USERMEM_URL;
const KEY = process.env.USERMEM_API_KEY;
const OTHER = process.env.USERMEM_TEST_OTHER_KEY;
const live = { skip: !(URL_ && KEY && OTHER) && "USERMEM_URL / USERMEM_API_KEY / USERMEM_TEST_OTHER_KEY not set" };
const T0 = 1_790_000_000;
const uid = (name) => `${name}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

describe("live usermem serve", live, () => {
  const c = () => new Client({ url: URL_, apiKey: KEY });

  test("write: ADD, then NOOP for the same value, UPDATE for a new one; the user's words kept", async () => {
    const u = uid("w");
    const first = await c().write({ user_id: u, kind: "fact", key: "city", value: "上海", source: "user_confirmed",
      now: T0 });
    assert.equal(first.op, "ADD");
    assert.equal(first.memory.value, "上海");
    assert.equal(first.memory.tenant, "local");
    const again = await c().write({ user_id: u, kind: "fact", key: "city", value: "上海", source: "user_confirmed",
      now: T0 + 1 });
    assert.equal(again.op, "NOOP");
    const moved = await c().write({ user_id: u, kind: "fact", key: "city", value: "Oslo", source: "user_confirmed",
      now: T0 + 2 });
    assert.equal(moved.op, "UPDATE");
    const bad = await c().write({ user_id: u, kind: "fact", key: "Not A Key", value: 1, now: T0 + 3 });
    assert.equal(bad.op, "REJECT", "a bad key is a REJECT decision (a result), as in Memory.write");
  });

  test("writeMany and get", async () => {
    const u = uid("b");
    const res = await c().writeMany({ user_id: u, now: T0, writes: [
      { kind: "fact", key: "city", value: "Paris", source: "user_confirmed" },
      { kind: "preference", key: "reply_length", value: "short", source: "user_confirmed" },
    ] });
    assert.deepEqual(res.results.map((r) => r.op), ["ADD", "ADD"]);
    const got = await c().get({ memory_id: res.results[0].memory.id, now: T0 + 1 });
    assert.equal(got.value, "Paris");
    assert.equal(await c().get({ memory_id: "no-such-memory", now: T0 + 1 }), null, "a 404 is null (Python: None)");
  });

  test("recall: records best first; recallScored with scores; an unknown user is empty", async () => {
    const u = uid("r");
    await c().write({ user_id: u, kind: "fact", key: "city", value: "Berlin", source: "user_confirmed", now: T0 });
    await c().write({ user_id: u, kind: "preference", key: "reply_length", value: "short", source: "user_confirmed",
      now: T0 });
    const got = await c().recall({ user_id: u, now: T0 + 10, kinds: ["fact", "preference"] });
    assert.deepEqual(got.items.map((m) => m.key).sort(), ["city", "reply_length"]);
    assert.ok(got.items.every((m) => typeof m.id === "string" && !("score" in m)), "recall answers records");
    const only = await c().recall({ user_id: u, now: T0 + 10, kinds: ["preference"] });
    assert.deepEqual(only.items.map((m) => m.value), ["short"]);
    const scored = await c().recallScored({ user_id: u, now: T0 + 10, k: 1 });
    assert.equal(scored.items.length, 1);
    assert.equal(typeof scored.items[0].score, "number");
    assert.equal(typeof scored.items[0].memory.key, "string");
    const none = await c().recall({ user_id: uid("nobody"), now: T0 });
    assert.deepEqual(none.items, []);
    assert.deepEqual(none.withheld, []);
  });

  test("recall reports a withheld L3 field (never its value) with a consent question", async () => {
    const u = uid("h");
    await c().write({ user_id: u, kind: "fact", key: "allergy", value: "花生", source: "user_confirmed", now: T0 });
    await c().write({ user_id: u, kind: "fact", key: "city", value: "上海", source: "user_confirmed", now: T0 });
    const got = await c().recall({ user_id: u, now: T0 + 1, purpose: "推荐午餐" });
    assert.deepEqual(got.items.map((m) => m.key), ["city"]);
    assert.equal(got.withheld.length, 1);
    const w = got.withheld[0];
    assert.equal(w.key, "allergy");
    assert.equal(w.level, "L3");
    assert.equal(w.reason, "needs_grant");
    assert.equal(w.question, "可以使用您的过敏信息来推荐午餐吗？");
    assert.ok(!JSON.stringify(got).includes("花生"), "a withheld value never travels");
    const scored = await c().recallScored({ user_id: u, now: T0 + 1, purpose: "推荐午餐" });
    assert.deepEqual(scored.withheld.map((x) => x.key), ["allergy"]);
  });

  test("history: every version, oldest first; an unknown key is empty", async () => {
    const u = uid("hi");
    for (const [i, v] of ["Oslo", "Paris", "Rome"].entries()) {
      await c().write({ user_id: u, kind: "fact", key: "city", value: v, source: "user_confirmed", now: T0 + i });
    }
    const h = await c().history({ user_id: u, key: "city", now: T0 + 10 });
    assert.deepEqual(h.items.map((m) => m.value), ["Oslo", "Paris", "Rome"]);
    const none = await c().history({ user_id: u, key: "nothing_here", now: T0 + 10 });
    assert.deepEqual(none.items, []);
  });

  test("forget one key, then forgetUser; forgetting what is not there is 0 rows", async () => {
    const u = uid("f");
    await c().write({ user_id: u, kind: "fact", key: "city", value: "Oslo", source: "user_confirmed", now: T0 });
    await c().write({ user_id: u, kind: "fact", key: "pet", value: "cat", source: "user_confirmed", now: T0 });
    const f = await c().forget({ user_id: u, key: "city", now: T0 + 1 });
    assert.ok(f.deleted >= 1);
    const left = await c().recall({ user_id: u, now: T0 + 2 });
    assert.deepEqual(left.items.map((m) => m.key), ["pet"]);
    assert.equal((await c().forget({ user_id: u, key: "city", now: T0 + 3 })).deleted, 0);
    assert.ok((await c().forgetUser({ user_id: u, now: T0 + 4 })).deleted >= 1);
    assert.deepEqual((await c().recall({ user_id: u, now: T0 + 5 })).items, []);
    assert.equal((await c().forgetUser({ user_id: uid("nobody"), now: T0 })).deleted, 0);
  });

  test("assemble: a prompt block within the budget with the facts the message needs", async () => {
    const u = uid("a");
    await c().write({ user_id: u, kind: "fact", key: "city", value: "Hangzhou", source: "user_confirmed", now: T0 });
    await c().write({ user_id: u, kind: "preference", key: "reply_length", value: "short", source: "user_confirmed",
      now: T0 });
    const a = await c().assemble({ user_id: u, message: "What's the weather like where I live?", budget_tokens: 300,
      now: T0 + 1 });
    assert.equal(a.budget_tokens, 300);
    assert.ok(a.tokens <= 300);
    assert.ok(a.prompt.includes("Hangzhou"), a.prompt);
    assert.ok(a.facts.length >= 1);
  });

  test("errors: typed, with code / status / field from the problem+json body", async () => {
    const u = uid("e");
    await assert.rejects(c().recall({ user_id: u, k: 0 }), (e) => {
      assert.ok(e instanceof ValidationError && e instanceof UsermemError);
      assert.equal(e.status, 422);
      assert.equal(e.code, "validation_error");
      assert.equal(e.field, "k");
      return true;
    });
    await assert.rejects(c().recall({ user_id: u, tenant: "globex" }), (e) => {
      assert.ok(e instanceof PermissionDenied);
      assert.equal(e.status, 403);
      assert.equal(e.code, "tenant_mismatch");
      return true;
    });
    await assert.rejects(new Client({ url: URL_, apiKey: "umk_wrong" }).recall({ user_id: u }), (e) => {
      assert.ok(e instanceof PermissionDenied);
      assert.equal(e.status, 401);
      return true;
    });
    await assert.rejects(c().contract({ key: "no_such_field" }), (e) => e instanceof NotFound && e.status === 404);
    // Refused before anything is sent: an empty path segment and an unknown parameter.
    await assert.rejects(c().history({ user_id: " ", key: "city" }),
      (e) => e instanceof ValidationError && e.field === "user_id" && e.status === null);
    await assert.rejects(c().recall({ user_id: u, nope: 1 }), (e) => e instanceof InvalidArgument && e.field === "nope");
    // Nothing was written by the refused calls.
    assert.deepEqual((await c().recall({ user_id: u })).items, []);
    // An endpoint this server does not have is a RemoteError, never "empty".
    await assert.rejects(new Client({ url: `${URL_}/nope`, apiKey: KEY }).recall({ user_id: u }),
      (e) => e instanceof RemoteError && e.status === 404);
  });

  test("webhooks: the secret once, never listed; serve's worker POSTs a signed write event", async () => {
    const got = [];
    const receiver = http.createServer((req, res) => {
      let body = "";
      req.on("data", (chunk) => { body += chunk; });
      req.on("end", () => { got.push({ headers: req.headers, body }); res.writeHead(204).end(); });
    });
    await new Promise((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${receiver.address().port}/hook`;
      const hook = await c().createWebhook({ url, events: ["write"] });
      assert.ok(hook.secret.length >= 32 && hook.id.startsWith("wh_"));
      const listed = await c().listWebhooks({});
      assert.ok(listed.items.some((h) => h.id === hook.id) && !JSON.stringify(listed).includes(hook.secret));
      assert.equal((await c().getWebhook({ webhook_id: hook.id })).url, url);
      const u = uid("wh");
      await c().write({ user_id: u, kind: "preference", key: "tone", value: "warm", source: "user_confirmed" });
      const deadline = Date.now() + 30_000;
      while (!got.some((g) => JSON.parse(g.body).user_id === u) && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const event = got.find((g) => JSON.parse(g.body).user_id === u);
      assert.ok(event, "the delivery worker of usermem serve sent the write");
      const { createHmac } = await import("node:crypto");
      const mac = createHmac("sha256", hook.secret).update(`${event.headers["x-usermem-timestamp"]}.${event.body}`);
      assert.equal(event.headers["x-usermem-signature"], `sha256=${mac.digest("hex")}`);
      assert.equal(JSON.parse(event.body).records[0].value, "warm");
      const log = await c().webhookDeliveries({ webhook_id: hook.id });
      assert.ok(log.items.length >= 1 && log.items.every((d) => d.webhook_id === hook.id));
      assert.equal((await c().deleteWebhook({ webhook_id: hook.id })).deleted, true);
      await assert.rejects(c().getWebhook({ webhook_id: hook.id }), NotFound);
    } finally {
      receiver.close();
    }
  });

  test("tenant isolation: another tenant's key neither sees, changes nor forgets these memories", async () => {
    const u = uid("t");
    const other = new Client({ url: URL_, apiKey: OTHER });
    await c().write({ user_id: u, kind: "fact", key: "city", value: "Lisbon", source: "user_confirmed", now: T0 });
    assert.deepEqual((await other.recall({ user_id: u, now: T0 + 1 })).items, []);
    assert.deepEqual((await other.history({ user_id: u, key: "city", now: T0 + 1 })).items, []);
    assert.equal((await other.forget({ user_id: u, key: "city", now: T0 + 1 })).deleted, 0);
    const theirs = await other.write({ user_id: u, kind: "fact", key: "city", value: "Madrid",
      source: "user_confirmed", now: T0 + 2 });
    assert.equal(theirs.op, "ADD");
    assert.equal(theirs.memory.tenant, "globex");
    assert.deepEqual((await c().recall({ user_id: u, now: T0 + 3 })).items.map((m) => m.value), ["Lisbon"]);
    assert.deepEqual((await other.recall({ user_id: u, now: T0 + 3 })).items.map((m) => m.value), ["Madrid"]);
    assert.equal((await other.whoami()).tenant, "globex");
    await assert.rejects(other.recall({ user_id: u, tenant: "local" }), (e) => e instanceof PermissionDenied);
  });
});

// -- retries: a loopback server that answers 429/503 first ------------------------------------------------------

async function flaky(answers) {
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push(req.url);
    const [status, headers, body] = answers[Math.min(seen.length - 1, answers.length - 1)];
    res.writeHead(status, { "Content-Type": "application/problem+json", ...headers });
    res.end(JSON.stringify(body));
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  return { url, seen, close: () => new Promise((resolve) => server.close(resolve)) };
}

const problem = (status, code) => ({ type: `urn:usermem:problem:${code}`, title: code, status, code, detail: code });

describe("retries on 429 / 503", () => {
  test("429 with Retry-After, then 503 without: retried after Retry-After, then backoff", async () => {
    const srv = await flaky([
      [429, { "Retry-After": "2" }, problem(429, "rate_limited")],
      [503, {}, problem(503, "store_error")],
      [200, {}, { user_id: "u", items: [], withheld: [] }],
    ]);
    const waits = [];
    try {
      const c = new Client({ url: srv.url, apiKey: "k", backoff: 0.25, sleep: async (s) => { waits.push(s); } });
      const got = await c.recallScored({ user_id: "u" });
      assert.deepEqual(got.items, []);
      assert.deepEqual(waits, [2, 0.5], "Retry-After honoured, else backoff * 2^attempt");
      assert.equal(srv.seen.length, 3);
    } finally {
      await srv.close();
    }
  });

  test("still 429 after the retries: RateLimited with retryAfter; waits capped by maxWait", async () => {
    const srv = await flaky([[429, { "Retry-After": "120" }, problem(429, "rate_limited")]]);
    const waits = [];
    try {
      const c = new Client({ url: srv.url, apiKey: "k", retries: 2, maxWait: 5, sleep: async (s) => { waits.push(s); } });
      await assert.rejects(c.whoami(), (e) => {
        assert.ok(e instanceof RateLimited && e instanceof UsermemError);
        assert.equal(e.retryAfter, 120);
        assert.equal(e.status, 429);
        assert.equal(e.code, "rate_limited");
        return true;
      });
      assert.deepEqual(waits, [5, 5]);
      assert.equal(srv.seen.length, 3);
    } finally {
      await srv.close();
    }
  });

  test("other statuses are not retried", async () => {
    const srv = await flaky([[409, {}, problem(409, "conflict")]]);
    try {
      const c = new Client({ url: srv.url, apiKey: "k", sleep: async () => assert.fail("no retry") });
      await assert.rejects(c.revert({ user_id: "u", key: "city" }), (e) => e.code === "conflict" && e.status === 409);
      assert.equal(srv.seen.length, 1);
    } finally {
      await srv.close();
    }
  });

  test("Retry-After as seconds or an HTTP date", () => {
    assert.equal(retryAfterSeconds("3"), 3);
    assert.equal(retryAfterSeconds("Wed, 21 Oct 2015 07:28:10 GMT", Date.parse("Wed, 21 Oct 2015 07:28:00 GMT")), 10);
    assert.equal(retryAfterSeconds("soon"), null);
    assert.equal(retryAfterSeconds(null), null);
  });
});

describe("offline", () => {
  test("an unreachable server is a StoreError; no URL or key is a ConfigError", async () => {
    const c = new Client({ url: "http://127.0.0.1:9", apiKey: "k", retries: 0 });
    await assert.rejects(c.whoami(), (e) => e instanceof StoreError && /cannot reach/.test(e.message));
    const saved = [process.env.USERMEM_URL, process.env.USERMEM_API_KEY];
    delete process.env.USERMEM_URL;
    delete process.env.USERMEM_API_KEY;
    try {
      assert.throws(() => new Client(), ConfigError);
    } finally {
      if (saved[0] !== undefined) process.env.USERMEM_URL = saved[0];
      if (saved[1] !== undefined) process.env.USERMEM_API_KEY = saved[1];
    }
  });

  test("errorFrom maps codes like the Python client", () => {
    assert.ok(errorFrom(422, problem(422, "validation_error")) instanceof ValidationError);
    assert.ok(errorFrom(404, problem(404, "user_not_found")) instanceof NotFound);
    assert.ok(errorFrom(404, problem(404, "route_not_found")) instanceof RemoteError);
    assert.ok(errorFrom(403, problem(403, "forbidden")) instanceof PermissionDenied);
    const e = errorFrom(418, { code: "teapot", detail: "short and stout" });
    assert.ok(e instanceof RemoteError && e.code === "teapot" && e.status === 418);
  });

  test("requests: wire names, whole bodies, fields-or-level, tenant header", () => {
    const c = new Client({ url: "http://h/", apiKey: "k" });
    const g = c.request("grant", { user_id: "u", fields_or_level: "l2", purpose: "p", ttl: 60 });
    assert.deepEqual(JSON.parse(g.body), { level: "L2", purpose: "p", ttl_seconds: 60 });
    const s = c.request("setContract", { contract: { key: "diet", kind: "fact" }, actor: "ops" });
    assert.equal(s.url, "http://h/v1/contracts/diet?actor=ops");
    const r = c.request("recall", { user_id: "a/b", kinds: ["fact", "preference"], tenant: "acme" });
    assert.equal(r.url, "http://h/v1/users/a%2Fb/memories?kinds=fact&kinds=preference");
    assert.equal(r.headers["X-Usermem-Tenant"], "acme");
    assert.ok(Object.keys(OPERATIONS).includes("recallScored"));
  });
});
