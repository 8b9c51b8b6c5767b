"""Streams one OpenAI chat completion and one Anthropic message through Envoy with the official
Python SDKs and prints, as JSON, when each chunk arrived. Run in its own process by the edge-case
scenario, so that the arrival times are not those of a busy test process."""

from __future__ import annotations

import json
import sys
import time

import anthropic
import openai


def main(proxy: str) -> None:
    oa = openai.OpenAI(api_key="sk-edges-stream", base_url="http://api.openai.com/v1", max_retries=2,
                       http_client=openai.DefaultHttpx2Client(proxy=proxy, trust_env=False))
    an = anthropic.Anthropic(api_key="sk-edges-stream", base_url="http://api.anthropic.com", max_retries=2,
                             http_client=anthropic.DefaultHttpxClient(proxy=proxy, trust_env=False))
    t0 = time.time()
    times, usage = [], None
    for chunk in oa.chat.completions.create(model="gpt-4o-mini", max_tokens=8, stream=True,
                                            stream_options={"include_usage": True},
                                            messages=[{"role": "user", "content": "Stream eight words."}]):
        times.append(time.time() - t0)
        if chunk.usage is not None:
            usage = chunk.usage.prompt_tokens
    t1 = time.time()
    events, atimes = [], []
    for ev in an.messages.create(model="claude-sonnet-4-6", max_tokens=8, stream=True,
                                 messages=[{"role": "user", "content": "Stream."}]):
        events.append(ev.type)
        atimes.append(time.time() - t1)
    print(json.dumps({"chunks": len(times), "first_chunk_s": round(times[0], 3), "last_chunk_s": round(times[-1], 3),
                      "usage_prompt_tokens": usage, "anthropic_events": events,
                      "anthropic_first_s": round(atimes[0], 3), "anthropic_last_s": round(atimes[-1], 3)}))


if __name__ == "__main__":
    main(sys.argv[1])
