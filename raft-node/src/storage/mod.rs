//! Durable state of a member, all in one sled database.
