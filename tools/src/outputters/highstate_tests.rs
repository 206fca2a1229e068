//! The highstate outputter held to Salt 3008.5's own: `tests/vectors/highstate.json` is
//! what Salt's outputter printed for the same returns (`tests/vectors/make_highstate.py`
//! writes it), with every `state_output` form, `state_verbose` and colours.

use serde_json::{json, Value};

use super::*;

fn vectors() -> Value {
    serde_json::from_str(include_str!("../../tests/vectors/highstate.json")).expect("the vectors are JSON")
}

#[test]
fn every_state_output_form_prints_as_salts() {
    let v = vectors();
    let data = v["data"].as_object().expect("data");
    let mut checked = 0;
    for (key, want) in v["out"].as_object().expect("out") {
        let parts: Vec<&str> = key.split('/').collect();
        let [form, verbose, color] = parts[..] else { continue };
        let style = Style { color: color == "True", verbose: verbose == "True", ..Style::default() }.with_state_output(form);
        assert_eq!(render_with(data, &style), want.as_str().expect("text"), "state_output {form}, state_verbose {verbose}, color {color}");
        checked += 1;
    }
    assert_eq!(checked, 28);
}

#[test]
fn the_summary_column_fits_the_longest_count_and_seconds_past_999_ms() {
    let v = vectors();
    assert_eq!(render(v["many"].as_object().expect("many")), v["out"]["many"]);
    assert_eq!(render(json!({"m3": ["Rendering SLS 'base:x' failed: oops"]}).as_object().unwrap()), v["out"]["errors"]);
    assert_eq!(render(json!({"m4": {}}).as_object().unwrap()), v["out"]["empty"]);
}

#[test]
fn a_run_prints_as_salts_highstate() {
    let data = json!({"h_master": {
        "salt_|-w_|-cmd.run_|-function": {"name": "cmd.run", "result": true, "comment": "Function ran successfully. Function cmd.run ran on m1.", "changes": {"ret": {"m1": ""}}, "__run_num__": 0, "start_time": "01:02:03.000004", "duration": 12.5, "__id__": "w"},
        "salt_|-b_|-b_|-state": {"name": "b", "result": false, "comment": "One or more requisite failed: o.w", "changes": {}, "__run_num__": 1, "start_time": "01:02:04.000000", "duration": 0.0, "__id__": "b"}
    }});
    let out = render(data.as_object().unwrap());
    let want = "h_master:\n----------\n          ID: w\n    Function: salt.function\n        Name: cmd.run\n      Result: True\n     Comment: Function ran successfully. Function cmd.run ran on m1.\n     Started: 01:02:03.000004\n    Duration: 12.5 ms\n     Changes:   \n              ----------\n              ret:\n                  ----------\n                  m1:\n----------\n          ID: b\n    Function: salt.state\n      Result: False\n     Comment: One or more requisite failed: o.w\n     Started: 01:02:04.000000\n    Duration: 0.0 ms\n     Changes:   \n\nSummary for h_master\n------------\nSucceeded: 1 (changed=1)\nFailed:    1\n------------\nTotal states run:     2\nTotal run time:  12.500 ms";
    assert_eq!(out, want, "\n{out}");
}

#[test]
fn state_output_is_read_as_salt_reads_it() {
    let s = |v: &str| Style::default().with_state_output(v);
    assert_eq!((s("terse").output, s("terse").ids), (StateOutput::Terse, false));
    assert_eq!((s("Changes_id").output, s("Changes_id").ids), (StateOutput::Changes, true));
    assert_eq!(s("mixed").output, StateOutput::Mixed);
    assert_eq!(s("filter").output, StateOutput::Full);
    assert_eq!(s("anything").output, StateOutput::Full);
}
