//! JSON Web Tokens (`--auth-token jwt,pub-key=...,priv-key=...,sign-method=...,ttl=...`): a token is
//! signed by the member that logs the user in and carries the user name, the auth revision it was issued
//! at and its expiry (etcd's claims `username`, `revision`, `exp`), so any member holding the public key
//! checks it without shared state, across restarts. HMAC methods use the private key file's bytes as the
//! secret, as etcd does.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// etcd's default JWT lifetime.
pub const DEFAULT_JWT_TTL: Duration = Duration::from_secs(300);

/// Signs and checks this member's JWTs.
#[derive(Clone)]
pub struct JwtTokens {
    algorithm: Algorithm,
    /// `None` on a member given only the public key: it checks tokens but cannot log users in.
    encoding: Option<EncodingKey>,
    decoding: DecodingKey,
    ttl: Duration,
}

impl std::fmt::Debug for JwtTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtTokens").field("algorithm", &self.algorithm).field("ttl", &self.ttl).finish()
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    username: String,
    revision: u64,
    exp: u64,
}

impl JwtTokens {
    /// Keys as PEM files' contents (HMAC: the secret's bytes, from the private key file).
    pub fn new(
        sign_method: &str,
        public: Option<&[u8]>,
        private: Option<&[u8]>,
        ttl: Duration,
    ) -> Result<Self, String> {
        let algorithm: Algorithm =
            sign_method.parse().map_err(|_| format!("unsupported JWT sign-method {sign_method:?}"))?;
        let bad_key = |which: &str, err: jsonwebtoken::errors::Error| format!("JWT {which} key: {err}");
        let (encoding, decoding) = match algorithm {
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => {
                let secret = private.ok_or("JWT sign-method HS* needs priv-key (the shared secret)")?;
                (Some(EncodingKey::from_secret(secret)), DecodingKey::from_secret(secret))
            }
            Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512 => {
                let public = public.ok_or("JWT needs pub-key")?;
                let encoding = private.map(EncodingKey::from_rsa_pem).transpose().map_err(|e| bad_key("private", e))?;
                (encoding, DecodingKey::from_rsa_pem(public).map_err(|e| bad_key("public", e))?)
            }
            Algorithm::ES256 | Algorithm::ES384 => {
                let public = public.ok_or("JWT needs pub-key")?;
                let encoding = private.map(EncodingKey::from_ec_pem).transpose().map_err(|e| bad_key("private", e))?;
                (encoding, DecodingKey::from_ec_pem(public).map_err(|e| bad_key("public", e))?)
            }
            Algorithm::EdDSA => {
                let public = public.ok_or("JWT needs pub-key")?;
                let encoding = private.map(EncodingKey::from_ed_pem).transpose().map_err(|e| bad_key("private", e))?;
                (encoding, DecodingKey::from_ed_pem(public).map_err(|e| bad_key("public", e))?)
            }
        };
        let tokens = JwtTokens { algorithm, encoding, decoding, ttl };
        // A key pair that does not match would only show at the first login: check it now.
        if tokens.encoding.is_some() {
            let probe = tokens.sign(b"probe", 0).map_err(|e| format!("JWT private key: {e}"))?;
            tokens.verify(&probe).ok_or("JWT keys: the public key does not check the private key's signatures")?;
        }
        Ok(tokens)
    }

    /// A token for `user`, issued at auth revision `revision`.
    /// A name that is not UTF-8 travels with U+FFFD in its place, as Go's JSON encoder writes it.
    pub fn sign(&self, user: &[u8], revision: u64) -> Result<String, String> {
        let key = self.encoding.as_ref().ok_or("this member has no JWT private key to sign with")?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let claims =
            Claims { username: String::from_utf8_lossy(user).into_owned(), revision, exp: (now + self.ttl).as_secs() };
        jsonwebtoken::encode(&Header::new(self.algorithm), &claims, key).map_err(|e| e.to_string())
    }

    /// The user and auth revision of a valid, unexpired token.
    pub fn verify(&self, token: &str) -> Option<(Vec<u8>, u64)> {
        let mut validation = Validation::new(self.algorithm);
        validation.leeway = 0;
        validation.required_spec_claims = ["exp".to_string()].into();
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation).ok()?;
        Some((data.claims.username.into_bytes(), data.claims.revision))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_tokens_carry_the_user_and_revision_and_expire() {
        let tokens = JwtTokens::new("HS256", None, Some(b"secret"), DEFAULT_JWT_TTL).expect("keys");
        let token = tokens.sign(b"alice", 7).expect("signed");
        assert_eq!(tokens.verify(&token), Some((b"alice".to_vec(), 7)));
        let other = JwtTokens::new("HS256", None, Some(b"other"), DEFAULT_JWT_TTL).expect("keys");
        assert_eq!(other.verify(&token), None, "another secret");
        let expired = JwtTokens::new("HS256", None, Some(b"secret"), Duration::ZERO).expect("keys");
        let old = expired.sign(b"alice", 7).expect("signed");
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(tokens.verify(&old), None, "expired");
        assert!(JwtTokens::new("XX999", None, Some(b"s"), DEFAULT_JWT_TTL).is_err());
        assert!(JwtTokens::new("RS256", None, None, DEFAULT_JWT_TTL).is_err(), "RS needs a public key");
    }
}
