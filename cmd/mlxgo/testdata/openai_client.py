"""The official openai client against a running `mlxgo serve` (started by
TestServeOpenAIClient in serve_test.go on a free loopback port).

usage: openai_client.py BASE_URL SEEDED_TEXT
SEEDED_TEXT is what `mlxgo generate --prompt Hi --temp 0.9 --seed 42
--max-tokens 10` printed; the seeded request must give it. Prints one line
per check and "ok: N checks" at the end; any failure raises.
"""
import json
import sys
import time
import urllib.request

import openai

base, seeded = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1
    print("ok:", what.split(":")[0])


def health():
    with urllib.request.urlopen(base + "/health") as r:
        return json.load(r)


idle = health()["memory"]
model = client.models.list().data[0].id
check(model, f"models.list: {model}")

messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
r = client.chat.completions.create(model=model, messages=messages, max_tokens=12)
text = r.choices[0].message.content
check(isinstance(text, str) and r.choices[0].finish_reason in ("stop", "length"), f"chat: {r!r}")
check(r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
      and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, f"chat usage: {r.usage!r}")

parts, finish, usage = [], None, None
stream = client.chat.completions.create(model=model, messages=messages, max_tokens=12, stream=True,
                                        stream_options={"include_usage": True})
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage
    for c in chunk.choices:
        if c.delta.content:
            parts.append(c.delta.content)
        if c.finish_reason:
            finish = c.finish_reason
check("".join(parts) == text and finish == r.choices[0].finish_reason, f"chat stream: {parts!r} vs {text!r}")
check(usage is not None and usage.completion_tokens == r.usage.completion_tokens, f"stream usage: {usage!r}")

c = client.completions.create(model=model, prompt="abc", max_tokens=8)
ctext = c.choices[0].text
check(isinstance(ctext, str) and c.object == "text_completion", f"completions: {c!r}")
streamed = "".join(x.choices[0].text for x in client.completions.create(model=model, prompt="abc", max_tokens=8, stream=True) if x.choices)
check(streamed == ctext, f"completions stream: {streamed!r} vs {ctext!r}")

# A stop string of two characters (two tokens here) cuts the text before it.
if len(ctext) >= 6:
    stop = ctext[3:5]
    s = client.completions.create(model=model, prompt="abc", max_tokens=8, stop=[stop])
    check(s.choices[0].text == ctext[:ctext.index(stop)] and s.choices[0].finish_reason == "stop",
          f"stop string: {s.choices[0].text!r} for stop {stop!r} in {ctext!r}")
    parts = [x.choices[0].text for x in client.completions.create(model=model, prompt="abc", max_tokens=8, stop=stop, stream=True) if x.choices]
    check("".join(parts) == ctext[:ctext.index(stop)], f"stop string streamed: {parts!r}")
else:
    raise AssertionError(f"completion {ctext!r} too short to test stop strings")

# Seeded sampling: mlxgo generate --seed's text, twice (the second from the prefix cache).
for i in range(2):
    s = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=10, temperature=0.9, seed=42)
    check(s.choices[0].message.content == seeded, f"seed {i}: {s.choices[0].message.content!r} vs generate's {seeded!r}")

# Cancellation mid-stream: close after two chunks; the server drops the sequence.
stream = client.completions.create(model=model, prompt="abc", max_tokens=200, stream=True)
got = 0
for chunk in stream:
    got += 1
    if got == 2:
        break
stream.close()
deadline = time.time() + 10
while True:
    m = health()["memory"]
    if m["sequences"] == 0 or time.time() > deadline:
        break
    time.sleep(0.01)
check(m["sequences"] == 0 and m["live_arrays"] - m["prompt_cache_arrays"] == idle["live_arrays"],
      f"cancel: memory {m} vs idle {idle}")

try:
    client.chat.completions.create(model=model, messages=messages, n=2)
    raise AssertionError("n=2 accepted")
except openai.BadRequestError as e:
    check(e.status_code == 400 and "n is 2" in str(e), f"n=2: {e}")
try:
    client.chat.completions.create(model="another", messages=messages)
    raise AssertionError("another model accepted")
except openai.NotFoundError as e:
    check(e.status_code == 404, f"unknown model: {e}")

print(f"ok: {checks} checks")
