"""What a web delta of a long streamed reply costs to render: the whole reply through
``preview_markdown`` and the HTML renderer (as every delta once was), against
``GrowingPreview``, which keeps the finished blocks' HTML and renders only the rest.

The reply is about 57 KB of Markdown (headings, lists, tables, code, links) and is
fed as a stream of ~200-character deltas; the figure is the mean time per delta over
the last 20 (the reply at its longest). Three runs; the spread is min–max.

    python -m bench.preview_render [--kb 57]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gateway.formatting.web_html as web_html  # noqa: E402
from gateway.formatting.preview import GrowingPreview, preview_markdown  # noqa: E402

SECTION = """\
## Step {n}: what changed

The **migration** for part {n} ran *twice*; see [the log](https://ci.example/run/{n}).

- compile: ok, with `make -j4`
- tests: {n}31 passed
  - two of them ~~flaky~~ fixed

| table | rows | state |
|---|---:|---|
| `users` | 1,2{n} | ok |
| **orders** | 8{n} | _locked_ |

```python
def step_{n}() -> None:
    print("<done {n}>")
```

> **Note:** nothing was lost in part {n}.

"""


def answer(kb: int) -> str:
    text, n = "", 0
    while len(text) < kb * 1000:
        text += SECTION.format(n=n)
        n += 1
    return text[:kb * 1000]


def per_delta(text: str, step: int, growing: bool) -> tuple[float, int]:
    """Mean ms per delta over the last 20, and the last delta's HTML size."""
    render = GrowingPreview(web_html.render) if growing else None
    times: list[float] = []
    html = ""
    # the whole render needs no history: only the last cuts are rendered
    first = step if growing else len(text) - 19 * step
    for end in range(first, len(text) + step, step):
        cut = text[:end]
        started = time.perf_counter()
        html = render(cut) if render else web_html.render(preview_markdown(cut))
        times.append(time.perf_counter() - started)
    return statistics.mean(times[-20:]) * 1000, len(html.encode())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kb", type=int, default=57)
    args = parser.parse_args()
    text = answer(args.kb)
    step = 200
    print(f"reply: {len(text.encode()) / 1000:.0f} KB of Markdown, deltas of {step} chars; "
          f"load average {os.getloadavg()[0]:.2f}")
    for name, growing in (("whole render", False), ("GrowingPreview", True)):
        runs = [per_delta(text, step, growing) for _ in range(3)]
        ms = [r[0] for r in runs]
        print(f"{name:>15}: {statistics.median(ms):7.2f} ms per delta "
              f"(runs {min(ms):.2f}–{max(ms):.2f}), HTML {runs[0][1] / 1000:.0f} KB")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
