//! Salt's outputters and output flags, as the `salt`, `salt-key` and `salt-run` commands
//! print: `--out nested|json|yaml|txt|raw|pprint|table|highstate`, `--out-indent`,
//! `--out-file`, `--state-output`, the summary.

pub mod highstate;
pub mod nested;
pub mod output;
pub mod pprint;
pub mod printer;
pub mod pyvalue;
pub mod summary;
pub mod table;
