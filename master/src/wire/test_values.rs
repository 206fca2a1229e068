//! Test support: msgpack values of every kind for the proptests of the payload helpers,
//! the in-place map scan and the request fuzzers, each with its own [`Shape`].

use proptest::prelude::*;
use rmpv::Value;

/// What the generated values look like.
#[derive(Clone, Copy)]
pub struct Shape {
    /// The regex a str is drawn from.
    pub text: &'static str,
    /// Longest bin (and a tenth of it: ext bodies, when `ext`).
    pub max_bin: usize,
    /// Ext values and F32s too.
    pub ext: bool,
    /// `prop_recursive`'s depth, desired size and items per collection.
    pub depth: u32,
    pub size: u32,
    pub items: usize,
    /// Map keys mostly short text (so keys repeat), else any value.
    pub text_keys: bool,
}

/// Values of `shape`: nil, bools, integers, floats, str, bin (and ext), in arrays and
/// maps nested up to its depth.
pub fn values(shape: Shape) -> BoxedStrategy<Value> {
    let mut leaves = vec![
        Just(Value::Nil).boxed(),
        any::<bool>().prop_map(Value::Boolean).boxed(),
        any::<u64>().prop_map(Value::from).boxed(),
        any::<i64>().prop_map(Value::from).boxed(),
        any::<f64>().prop_map(Value::F64).boxed(),
        shape.text.prop_map(|s| Value::from(s.as_str())).boxed(),
        proptest::collection::vec(any::<u8>(), 0..=shape.max_bin).prop_map(Value::Binary).boxed(),
    ];
    if shape.ext {
        leaves.push(any::<f32>().prop_map(Value::F32).boxed());
        leaves.push((any::<i8>(), proptest::collection::vec(any::<u8>(), 0..=shape.max_bin / 10 + 3)).prop_map(|(t, b)| Value::Ext(t, b)).boxed());
    }
    let items = shape.items;
    let text_keys = shape.text_keys;
    proptest::strategy::Union::new(leaves)
        .prop_recursive(shape.depth, shape.size, items as u32, move |inner| {
            let key = if text_keys { prop_oneof![3 => "[ab]{0,2}".prop_map(|s| Value::from(s.as_str())), 1 => inner.clone()].boxed() } else { inner.clone().boxed() };
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..items).prop_map(Value::Array),
                proptest::collection::vec((key, inner), 0..items).prop_map(Value::Map),
            ]
        })
        .boxed()
}
