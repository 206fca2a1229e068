//! Links what Debian's static `librocksdb.a` needs when `ROCKSDB_STATIC` is set
//! (`.cargo/config.toml`): the archive names its compression libraries but, unlike the
//! shared library, does not carry them.
fn main() {
    println!("cargo:rerun-if-env-changed=ROCKSDB_STATIC");
    if std::env::var_os("ROCKSDB_STATIC").is_some() {
        for lib in ["snappy", "z", "bz2", "lz4", "zstd", "gflags"] {
            println!("cargo:rustc-link-lib=dylib={lib}");
        }
    }
}
