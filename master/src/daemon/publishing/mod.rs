//! The publish port's side: applied jobs published, the publish (AES) key kept and rotated.

pub mod publish;
pub mod publish_key;
