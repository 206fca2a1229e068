//! Binding a runner's arguments as Python binds a call: `salt-run FUN a b key=value`
//! arrives as `{"cmd": "runner", "fun", "arg": [a, b], "kwarg": {key: value}}` and each
//! runner names its parameters in Salt's order with their defaults. Positional arguments
//! fill the parameters in order, keywords by name; a missing required parameter, one
//! given twice, too many positional arguments or an unknown keyword is refused with
//! the message Python gives (`Passed invalid arguments: list_job() missing 1 required
//! positional argument: 'jid'`), as `salt-run` prints it.

use serde_json::{Map, Value as J};

use crate::error::{Error, Result};

/// The arguments of one runner call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunnerArgs {
    pub arg: Vec<J>,
    pub kwarg: Map<String, J>,
}

/// One parameter: its name and its default (`None`: required).
pub type Param = (&'static str, Option<J>);

/// The bound parameters, and the keywords a `**kwargs` runner takes beyond them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bound {
    pub params: Map<String, J>,
    pub extra: Map<String, J>,
}

impl Bound {
    /// A bound parameter (always present after [`RunnerArgs::bind`]).
    pub fn get(&self, name: &str) -> &J {
        self.params.get(name).unwrap_or(&J::Null)
    }

    /// A parameter as text: strings as they are, numbers as written (a jid typed on a
    /// command line may arrive as a number), `None` for null.
    pub fn text(&self, name: &str) -> Option<String> {
        match self.get(name) {
            J::Null => None,
            J::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }

    /// A parameter as Salt's truthiness sees it.
    pub fn truthy(&self, name: &str) -> bool {
        match self.get(name) {
            J::Null => false,
            J::Bool(b) => *b,
            J::String(s) => crate::config::parse_bool(s).unwrap_or(!s.is_empty()),
            J::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
            J::Array(a) => !a.is_empty(),
            J::Object(o) => !o.is_empty(),
        }
    }
}

impl RunnerArgs {
    /// The `arg` and `kwarg` fields of a request (absent: none).
    pub fn from_req(req: &J) -> RunnerArgs {
        RunnerArgs {
            arg: req.get("arg").and_then(J::as_array).cloned().unwrap_or_default(),
            kwarg: req.get("kwarg").and_then(J::as_object).cloned().unwrap_or_default(),
        }
    }

    /// Binds to `params` of runner `fun` (`module.function`); `var_kw`: the runner takes
    /// `**kwargs` (unknown keywords are then returned in [`Bound::extra`]). Keywords
    /// starting with `__` (Salt's internal ones) are ignored.
    pub fn bind(&self, fun: &str, params: &[Param], var_kw: bool) -> Result<Bound> {
        let name = fun.rsplit('.').next().unwrap_or(fun);
        let invalid = |msg: String| Error::refused(format!("Passed invalid arguments: {name}() {msg}"));
        if self.arg.len() > params.len() {
            let required = params.iter().filter(|p| p.1.is_none()).count();
            let takes = if required == params.len() { format!("{}", params.len()) } else { format!("from {required} to {}", params.len()) };
            let word = if params.len() == 1 && required == 1 { "argument" } else { "arguments" };
            return Err(invalid(format!("takes {takes} positional {word} but {} were given", self.arg.len())));
        }
        let mut out = Bound::default();
        for (i, v) in self.arg.iter().enumerate() {
            out.params.insert(params[i].0.to_string(), v.clone());
        }
        for (k, v) in &self.kwarg {
            if k.starts_with("__") {
                continue;
            }
            if params.iter().any(|p| p.0 == k) {
                if out.params.contains_key(k) {
                    return Err(invalid(format!("got multiple values for argument '{k}'")));
                }
                out.params.insert(k.clone(), v.clone());
            } else if var_kw {
                out.extra.insert(k.clone(), v.clone());
            } else {
                return Err(invalid(format!("got an unexpected keyword argument '{k}'")));
            }
        }
        let missing: Vec<&str> = params.iter().filter(|p| p.1.is_none() && !out.params.contains_key(p.0)).map(|p| p.0).collect();
        if !missing.is_empty() {
            let names: Vec<String> = missing.iter().map(|m| format!("'{m}'")).collect();
            let list = match names.len() {
                1 => names[0].clone(),
                n => format!("{} and {}", names[..n - 1].join(", "), names[n - 1]),
            };
            let word = if missing.len() == 1 { "argument" } else { "arguments" };
            return Err(invalid(format!("missing {} required positional {word}: {list}", missing.len())));
        }
        for (p, default) in params {
            if let (false, Some(d)) = (out.params.contains_key(*p), default) {
                out.params.insert(p.to_string(), d.clone());
            }
        }
        // Parameters in Salt's order.
        let mut ordered = Map::new();
        for (p, _) in params {
            if let Some(v) = out.params.remove(*p) {
                ordered.insert(p.to_string(), v);
            }
        }
        out.params = ordered;
        Ok(out)
    }
}

/// A list argument given as a list or as comma-separated text (`subset=a,b`).
pub fn id_list(v: &J) -> Option<Vec<String>> {
    match v {
        J::Null => None,
        J::Array(a) => Some(a.iter().map(|x| x.as_str().map(String::from).unwrap_or_else(|| x.to_string())).collect()),
        J::String(s) => Some(s.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect()),
        other => Some(vec![other.to_string()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(arg: J, kwarg: J) -> RunnerArgs {
        RunnerArgs::from_req(&json!({ "arg": arg, "kwarg": kwarg }))
    }

    const CACHE: &[Param] = &[("tgt", None), ("tgt_type", Some(J::Null))];

    #[test]
    fn positional_and_keywords_bind_as_python_does() {
        let b = args(json!(["web*"]), json!({"tgt_type": "pcre"})).bind("cache.grains", CACHE, false).unwrap();
        assert_eq!(J::Object(b.params), json!({"tgt": "web*", "tgt_type": "pcre"}));
        let b = args(json!([]), json!({"tgt": "a"})).bind("cache.grains", CACHE, false).unwrap();
        assert_eq!(b.get("tgt_type"), &J::Null, "defaults fill what is not given");
        let b = args(json!([]), json!({"minion": "m1", "pillarenv": "dev", "foo": "bar", "__pub_user": "x"})).bind("pillar.show_pillar", &[("minion", Some(json!("*")))], true).unwrap();
        assert_eq!(J::Object(b.extra), json!({"pillarenv": "dev", "foo": "bar"}), "**kwargs keeps the rest, minus Salt's internal keys");
    }

    #[test]
    fn bad_calls_are_refused_with_pythons_words() {
        let e = |a: J, k: J| args(a, k).bind("jobs.list_job", &[("jid", None), ("ext_source", Some(J::Null))], false).unwrap_err().to_string();
        assert!(e(json!([]), json!({})).contains("Passed invalid arguments: list_job() missing 1 required positional argument: 'jid'"));
        assert!(e(json!(["1", "2", "3"]), json!({})).contains("list_job() takes from 1 to 2 positional arguments but 3 were given"));
        assert!(e(json!(["1"]), json!({"jid": "2"})).contains("list_job() got multiple values for argument 'jid'"));
        assert!(e(json!(["1"]), json!({"bogus": 1})).contains("list_job() got an unexpected keyword argument 'bogus'"));
        let two = args(json!([]), json!({})).bind("x.f", &[("a", None), ("b", None)], false).unwrap_err().to_string();
        assert!(two.contains("missing 2 required positional arguments: 'a' and 'b'"), "{two}");
    }

    #[test]
    fn text_and_truthiness_of_command_line_values() {
        let b = args(json!([1234567, "True"]), json!({})).bind("x.f", &[("jid", None), ("show_ip", Some(J::Bool(false)))], false).unwrap();
        assert_eq!(b.text("jid").as_deref(), Some("1234567"), "a number read from a command line is still text");
        assert!(b.truthy("show_ip"));
        assert_eq!(id_list(&json!("a, b,")), Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(id_list(&json!(["a"])), Some(vec!["a".to_string()]));
    }
}
