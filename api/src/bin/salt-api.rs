//! `salt-api`: the REST endpoint (rest_cherrypy's shape) in front of a running Halite
//! master; see `halite_api` and docs/operations.md, "salt-api".

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;

use halite_api::{self as api, config::ApiConfig};
use halite_tools::common::{init_logging, load_config, run, Failure};

#[derive(Parser, Debug)]
#[command(name = "salt-api", about = "REST API for Salt (Halite; rest_cherrypy's shape)", version)]
struct Args {
    #[arg(short = 'c', long = "config-dir", default_value = "/etc/salt")]
    config_dir: PathBuf,
    #[arg(short = 'l', long = "log-level", default_value = "warning")]
    log_level: String,
}

fn main() {
    let args = Args::parse();
    run(|| {
        init_logging(&args.log_level);
        let cfg = load_config(&args.config_dir)?;
        let api_cfg = ApiConfig::from_master(&cfg).map_err(|e| Failure::new(e.to_string(), 2))?;
        let tls = match &api_cfg.tls {
            Some((crt, key)) => Some(api::tls::acceptor(crt, key).map_err(|e| Failure::new(e.to_string(), 2))?),
            None => None,
        };
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        rt.block_on(async move {
            let addr = format!("{}:{}", api_cfg.host, api_cfg.port);
            let listener = tokio::net::TcpListener::bind(&addr).await.map_err(|e| Failure::new(format!("salt-api: cannot listen on {addr}: {e}"), 1))?;
            tracing::info!("salt-api: listening on {}://{addr}", if tls.is_some() { "https" } else { "http" });
            api::serve(Arc::new(api_cfg), listener, tls).await;
            Ok(())
        })
    })
}
