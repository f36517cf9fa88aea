// Package memorymanager will own NUMA memory and hugepages assignment for
// Guaranteed pods (policies None and Static), its checkpoint and admission.
//
// It does not enforce limits; the runtime does, from what it hands out.
package memorymanager
