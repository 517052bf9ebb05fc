// Type-level test of index.d.ts / operations.d.ts (not run by node --test; tests/test_ts_types.py compiles it with
// Debian's tsc, node-typescript): compile with
//   tsc --noEmit --strict --target es2022 --lib es2022,dom --module nodenext \
//     --moduleResolution nodenext typecheck/usage.ts
// The @ts-expect-error lines must be errors (a required parameter missing, a method without an HTTP route).
import Client, { ValidationError, UsermemError, RateLimited, type RecallOut, type WriteResultOut } from "../src/index.js";

async function main(): Promise<void> {
  const c = new Client({ url: "http://127.0.0.1:8000", apiKey: "umk_x" });
  const w: WriteResultOut = await c.write({ user_id: "alice", kind: "fact", key: "city", value: "Oslo" });
  console.log(w.op, w.memory?.value);
  const r = await c.recall({ user_id: "alice", purpose: "lunch" });
  for (const m of r.items) console.log(m.key, m.value);
  for (const x of r.withheld) console.log(x.key, x.reason, x.question);
  const s: RecallOut = await c.recallScored({ user_id: "alice", k: 3 });
  console.log(s.items[0]?.score);
  const g = await c.get({ memory_id: "x" });
  if (g !== null) console.log(g.id);
  const a = await c.assemble({ user_id: "alice", message: "hi", budget_tokens: 200 });
  console.log(a.prompt.length);
  await c.whoami();
  await c.setContract({ contract: { key: "diet" } });
  try {
    await c.forget({ user_id: "alice", key: "city" });
  } catch (e) {
    if (e instanceof ValidationError) console.log(e.field, e.status, e.code);
    if (e instanceof RateLimited) console.log(e.retryAfter);
    if (e instanceof UsermemError) console.log(e.problem?.detail);
  }
  const hook = await c.createWebhook({ url: "https://example.com/hook", events: ["write", "forget"] });
  console.log(hook.id, hook.secret.length);
  for (const h of (await c.listWebhooks({})).items) console.log(h.url, h.enabled, h.failures);
  const ping = await c.pingWebhook({ webhook_id: hook.id });
  console.log(ping.state, ping.attempts[0]?.status);
  const raw = await c.call("history", { user_id: "alice", key: "city" });
  console.log(raw.items.length);
  // @ts-expect-error user_id is required
  await c.recall({ k: 3 });
  // @ts-expect-error url is required
  await c.createWebhook({ events: ["write"] });
  // @ts-expect-error no such method
  await c.contractsFor({});
}
void main();
