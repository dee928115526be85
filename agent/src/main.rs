//! The `cepheus` binary.

fn main() {
    println!("cepheus");
}
