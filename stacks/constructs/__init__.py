"""One construct per part of the system; stacks assemble them and wire grants between them."""
