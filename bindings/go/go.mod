module tachyon/bindings/go

go 1.19
