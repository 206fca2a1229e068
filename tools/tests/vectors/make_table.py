"""Writes tools/tests/vectors/table.json: what Salt 3008.5's `table` outputter prints
for sample minion returns, without and with colours; tools/src/outputters/table.rs is held to it.

    ~/.cache/halite/venv-salt-3008.5/bin/python tools/tests/vectors/make_table.py tools/tests/vectors/table.json

Left out on purpose: rows whose cells wrap onto different numbers of lines (Python 3's
`map` then drops the extra lines, a defect Halite does not copy: it pads them).
"""
import json
import sys

import salt.config
import salt.output

datas = [
    {"m1": [{"name": "nginx", "version": "1.2", "active": True}, {"name": "redis-server", "version": "7.0.11", "active": False}]},
    {"m1": ["a", "bb", "ccc dd"]},
    {"edge01": {"comment": "", "result": True, "out": [
        {"mac": "40:A6:77:5A:50:01", "interface": "ae1.900", "last_move": 0.0, "moves": 0, "static": False, "vlan": 111, "active": True},
        {"mac": "64:16:8D:32:26:58", "interface": "ae1.111", "last_move": 0.0, "moves": 0, "static": False, "vlan": 111, "active": True}]}},
    {"m2": {"z": [["x", "y"], ["longer one", "b"]], "a": {"deeper": ["p", "q"]}}},
    {"m3": [{"k": None, "n": 12345678901234567890, "l": ["a", 1], "d": {"x": 1}, "f": 1.5}]},
    {"m4": [{"a": 1}, "mixed"]},
    {"m5": []},
    {"m6": True},
    {"m7": "just text"},
    {"m8": [{"text": "word " * 15 + "end", "more": "other " * 12 + "fin"}]},
    {"m9": [{"h\u00e9llo": "w\u00f6rld", "snake_case_key": "x"}]},
    {"a": [{"odd": "ab"}, {"odd": "abcd"}], "b": [{"even": "abc"}, {"even": "abcde"}]},
]
cases = []
for d in datas:
    for color in (False, True):
        opts = dict(salt.config.DEFAULT_MASTER_OPTS)
        opts.update(color=color)
        cases.append({"color": color, "data": d, "text": salt.output.out_format(d, "table", opts)})
json.dump(cases, open(sys.argv[1], "w"), indent=1, ensure_ascii=False)
