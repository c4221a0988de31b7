//! Simple tokens (`--auth-token simple`): random strings a member maps to a user name, each forgotten after
//! `--auth-token-ttl` seconds without use.
//!
//! As in etcd, the table is the member's own and lives only in memory: every member registers a token
//! when it applies the `Authenticate` that created it (so any member accepts it), and a restarted member
//! knows none (clients authenticate again after "invalid auth token"). Deadlines use the local clock,
//! which is why the table stays out of the replicated state.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::Rng;

/// etcd's default `--auth-token-ttl`.
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct TokenTable {
    ttl: Duration,
    tokens: Mutex<HashMap<String, Entry>>,
}

#[derive(Debug)]
struct Entry {
    user: Vec<u8>,
    deadline: Instant,
}

impl Default for TokenTable {
    fn default() -> Self {
        Self { ttl: DEFAULT_TTL, tokens: Mutex::new(HashMap::new()) }
    }
}

impl TokenTable {
    pub fn set_ttl(&mut self, ttl: Duration) {
        self.ttl = ttl;
    }

    /// A fresh token: 16 random letters, a dot and a random number, the shape of etcd's simple tokens.
    pub fn generate() -> String {
        let mut rng = rand::thread_rng();
        let mut token: String = (0..16)
            .map(|_| {
                let n = rng.gen_range(0..52u8);
                char::from(if n < 26 { b'a' + n } else { b'A' + n - 26 })
            })
            .collect();
        token.push('.');
        token.push_str(&rng.gen_range(1..u32::MAX).to_string());
        token
    }

    /// Registers `token` for `user`; expired tokens are dropped on the way, so the table stays bounded by
    /// the tokens issued within one TTL.
    pub fn insert(&self, token: String, user: Vec<u8>) {
        let now = Instant::now();
        let mut tokens = self.tokens.lock();
        tokens.retain(|_, entry| entry.deadline > now);
        tokens.insert(token, Entry { user, deadline: now + self.ttl });
    }

    /// The user a live token belongs to; each use restarts the token's TTL, as etcd's.
    pub fn user(&self, token: &str) -> Option<Vec<u8>> {
        let now = Instant::now();
        let mut tokens = self.tokens.lock();
        match tokens.get_mut(token) {
            Some(entry) if entry.deadline > now => {
                entry.deadline = now + self.ttl;
                Some(entry.user.clone())
            }
            Some(_) => {
                tokens.remove(token);
                None
            }
            None => None,
        }
    }

    /// Forgets every token of `user` (deleted, or given a new password).
    pub fn forget_user(&self, user: &[u8]) {
        self.tokens.lock().retain(|_, entry| entry.user != user);
    }

    pub fn clear(&self) {
        self.tokens.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_resolve_until_their_ttl_passes_unused_and_die_with_their_user() {
        let mut table = TokenTable::default();
        table.set_ttl(Duration::from_millis(50));
        let (a, b) = (TokenTable::generate(), TokenTable::generate());
        assert_ne!(a, b);
        table.insert(a.clone(), b"alice".to_vec());
        table.insert(b.clone(), b"bob".to_vec());
        assert_eq!(table.user(&a).as_deref(), Some(&b"alice"[..]));
        table.forget_user(b"bob");
        assert_eq!(table.user(&b), None);
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(table.user(&a), None);
    }
}
