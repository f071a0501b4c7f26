//! Helpers the configuration tests share: a configuration file of their
//! own, the variables around it, and loading both.

use std::collections::HashMap;
use std::path::PathBuf;

use super::{Config, ConfigError, ENV_CONFIG};

/// The variables `vars`, as the environment would give them.
pub(super) fn env(vars: &[(&str, &str)]) -> HashMap<String, String> {
    vars.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Loads the variables `vars` alone (no file).
pub(super) fn load_env(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_env_map(&env(vars))
}

/// A configuration file with `toml` in it, removed when dropped, and the
/// variables that point at it.
pub(super) struct File {
    path: PathBuf,
    pub env: HashMap<String, String>,
}

impl File {
    pub fn new(toml: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("oncehook-config-{}.toml", uuid::Uuid::new_v4()));
        std::fs::write(&path, toml).expect("write temp config");
        let env = HashMap::from([(ENV_CONFIG.to_owned(), path.display().to_string())]);
        File { path, env }
    }

    /// Sets a variable next to the file.
    pub fn set(&mut self, key: &str, value: &str) -> &mut Self {
        self.env.insert(key.to_owned(), value.to_owned());
        self
    }

    pub fn load(&self) -> Result<Config, ConfigError> {
        Config::from_env_map(&self.env)
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Loads `toml` as the file with `vars` set.
pub(super) fn load(toml: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let mut file = File::new(toml);
    for (k, v) in vars {
        file.set(k, v);
    }
    file.load()
}

/// Like [`load`], for a configuration that must be refused: the message.
pub(super) fn refused(toml: &str, vars: &[(&str, &str)]) -> String {
    load(toml, vars)
        .expect_err("must refuse to start")
        .to_string()
}

/// Like [`load_env`], for variables that must be refused: the message.
pub(super) fn refused_env(vars: &[(&str, &str)]) -> String {
    load_env(vars)
        .expect_err("must refuse to start")
        .to_string()
}
