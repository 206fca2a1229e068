"""Writes tools/tests/vectors/highstate.json: Salt 3008.5's own highstate outputter run
over sample state returns with each state_output / state_verbose / color setting, the
vectors tools/src/outputters/highstate_tests.rs holds Halite's outputter to.

    ~/.cache/halite/venv-salt-3008.5/bin/python tools/tests/vectors/make_highstate.py \
        MASTER_CONFIG tools/tests/vectors/highstate.json

MASTER_CONFIG: any master config file (e.g. one line `root_dir: /tmp/x`).
"""
import json, sys
import salt.loader, salt.config, salt.output
opts = salt.config.master_config(sys.argv[1])
data = {"m1": {
  "file_|-conf_|-/etc/app.conf_|-managed": {"name": "/etc/app.conf", "result": True, "comment": "File /etc/app.conf updated", "changes": {"diff": "New file", "mode": "0644"}, "__run_num__": 0, "start_time": "10:00:00.000001", "duration": 12.5, "__id__": "conf", "__sls__": "app"},
  "cmd_|-hello_|-echo hi_|-run": {"name": "echo hi", "result": True, "comment": "Command \"echo hi\" run", "changes": {"pid": 42, "retcode": 0, "stdout": "hi", "stderr": ""}, "__run_num__": 1, "start_time": "10:00:00.100000", "duration": 7.25, "__id__": "hello", "__sls__": "app"},
  "pkg_|-tools_|-tools_|-installed": {"name": "tools", "result": True, "comment": "All specified packages are already installed", "changes": {}, "__run_num__": 2, "start_time": "10:00:00.200000", "duration": 1.0, "__id__": "tools", "__sls__": "app"},
  "service_|-app_|-app_|-running": {"name": "app", "result": False, "comment": "Service app is not available\nsecond line", "changes": {}, "__run_num__": 3, "start_time": "10:00:00.300000", "duration": 3, "__id__": "app", "__sls__": "app"},
  "test_|-maybe_|-maybe_|-nop": {"name": "maybe", "result": None, "comment": "would change", "changes": {}, "__run_num__": 4, "start_time": "10:00:00.400000", "duration": 0.5, "__id__": "maybe", "__sls__": "app"}
}}
out = {}
for so in ["full", "terse", "mixed", "changes", "full_id", "terse_id", "filter"]:
    for sv in [True, False]:
        for color in [False, True]:
            o = dict(opts); o.update({"state_output": so, "state_verbose": sv, "color": color, "output": "highstate"})
            out[f"{so}/{sv}/{color}"] = salt.output.out_format(json.loads(json.dumps(data)), "highstate", o)
many = {"m2": {f"test_|-s{i}_|-s{i}_|-succeed_without_changes": {"name": f"s{i}", "result": i % 2 == 0, "comment": "ok", "changes": {}, "__run_num__": i, "start_time": "01:00:00.000000", "duration": 1000.0} for i in range(12)}}
o = dict(opts); o.update({"color": False, "output": "highstate"})
out["many"] = salt.output.out_format(many, "highstate", o)
out["errors"] = salt.output.out_format({"m3": ["Rendering SLS 'base:x' failed: oops"]}, "highstate", o)
out["empty"] = salt.output.out_format({"m4": {}}, "highstate", o)
json.dump({"data": data, "many": many, "out": out}, open(sys.argv[2], 'w'), indent=1)
