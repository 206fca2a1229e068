//! Who may do what: `external_auth` rules (salt-api, eauth), `publisher_acl` and its blacklist (`salt` run by system users).

pub mod acl;
pub mod publisher_acl;
