//! The Python methods Salt's Jinja templates (reactor and orchestrate SLS files) call on
//! `data` and its strings (`data.get('id')`, `data['id'].startswith('web')`), which
//! minijinja does not have:
//! maps `get`, `items`, `keys`, `values`; strings `startswith`, `endswith`, `split`,
//! `lower`, `upper`, `strip`, `replace`. Anything else stays an unknown method.

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind, State};

/// The callback for `Environment::set_unknown_method_callback`.
pub fn methods(state: &State, v: &Value, name: &str, args: &[Value]) -> Result<Value, Error> {
    let arg = |i: usize| args.get(i).cloned();
    let text = |i: usize| args.get(i).and_then(|a| a.as_str().map(String::from)).ok_or_else(|| Error::new(ErrorKind::InvalidOperation, format!("{name}() takes a string")));
    match (v.kind(), name) {
        (ValueKind::Map, "get") => {
            let key = arg(0).ok_or_else(|| Error::new(ErrorKind::MissingArgument, "get() takes a key"))?;
            let found = v.get_item(&key)?;
            Ok(if found.is_undefined() { arg(1).unwrap_or(Value::from(())) } else { found })
        }
        (ValueKind::Map, "items") => state.apply_filter("items", std::slice::from_ref(v)),
        (ValueKind::Map, "keys") => Ok(Value::from(v.try_iter()?.collect::<Vec<_>>())),
        (ValueKind::Map, "values") => Ok(Value::from(v.try_iter()?.map(|k| v.get_item(&k).unwrap_or_default()).collect::<Vec<_>>())),
        (ValueKind::String, _) => {
            let s = v.as_str().unwrap_or("");
            Ok(match name {
                "startswith" => Value::from(s.starts_with(text(0)?.as_str())),
                "endswith" => Value::from(s.ends_with(text(0)?.as_str())),
                "lower" => Value::from(s.to_lowercase()),
                "upper" => Value::from(s.to_uppercase()),
                "strip" => Value::from(s.trim()),
                "replace" => Value::from(s.replace(text(0)?.as_str(), text(1)?.as_str())),
                "split" => match args.first() {
                    Some(_) => Value::from(s.split(text(0)?.as_str()).map(String::from).collect::<Vec<_>>()),
                    None => Value::from(s.split_whitespace().map(String::from).collect::<Vec<_>>()),
                },
                _ => return Err(Error::from(ErrorKind::UnknownMethod)),
            })
        }
        _ => Err(Error::from(ErrorKind::UnknownMethod)),
    }
}
