module inference-operator.dev/standins

go 1.24
