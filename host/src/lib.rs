pub const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/lowcon_kernels.ptx"));
