"""`python bench/http.py`: recall and search latency over HTTP on the daemon's Unix socket.

The benchmark itself is `_http_bench.py` (its docstring has the options). This file is named
as the issue asks, which is also the name of the standard library's `http` package: every
script run from bench/ has this directory first on sys.path, so `import http` (httpx does it)
finds this file. When imported under that name, it loads the real package in its place.
"""

import sys

if __name__ == "http":
    import importlib.machinery
    import importlib.util
    from pathlib import Path

    here = Path(__file__).resolve().parent
    elsewhere = [p for p in sys.path if Path(p or ".").resolve() != here]
    spec = importlib.machinery.PathFinder.find_spec("http", elsewhere)
    if spec is None or spec.loader is None:
        raise ImportError("the standard library's http package is missing")
    module = importlib.util.module_from_spec(spec)
    sys.modules["http"] = module
    spec.loader.exec_module(module)
elif __name__ == "__main__":
    from _http_bench import main

    main()
