"""Writes tools/tests/vectors/pprint.json: what CPython's pprint.pformat (Salt's pprint
outputter) prints for sample minion returns, with indent 1 and 4; tools/src/outputters/pprint.rs
is held to it.

    ~/.cache/halite/venv-salt-3008.5/bin/python tools/tests/vectors/make_pprint.py tools/tests/vectors/pprint.json
"""
import json
import pprint
import sys

datas = [
    {"m1": True},
    {"m1": {"list": list(range(30)), "text": "a " * 60, "nested": {"k" + str(i): "v" * i for i in range(12)},
            "multi": "line one\nline two\n", "e": [], "d": {}, "t": True, "n": None, "f": 1.5}},
    {"web1": "x" * 120},
    {"web1": "word " * 40 + "\n" + "second line is short\n" + "third " * 20},
    {"m2": [{"name": "pkg-%d" % i, "version": "1.%d.0" % i, "quote": "it's \"q\""} for i in range(5)]},
    {"m3": {"pid": 4242, "retcode": 0, "stderr": "", "stdout": "total 0\ndrwxr-xr-x  2 root root  40 Nov 25 02:00 .\n" * 3}},
    {"m4": [[1, 2, [3, 4, [5, 6] * 10]], {"deep": {"deeper": {"deepest": ["x" * 30, "y" * 30, "z" * 30]}}}]},
    {"m5": {"unicode": "h\u00e9llo w\u00f6rld " * 10, "tab": "a\tb", "back": "c:\\path\\x"}},
    {"m6": "\u00e9" * 90},
    {"m7": {"odd": "nbsp\xa0shy\xadzw\u200bbom\ufeffc1\x85pu\ue000", "ok": "\u00e9\u2030"}},
]
cases = []
for d in datas:
    for indent in (1, 4):
        cases.append({"indent": indent, "data": d, "text": pprint.pformat(d, indent=indent)})
json.dump(cases, open(sys.argv[1], "w"), indent=1, ensure_ascii=False)
