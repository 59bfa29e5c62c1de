// Package lora puts mlx_lm's LoRA adapters on a MiniCPM5 (Llama) model:
// which layers get them and how they start, as mlx_lm's
// tuner.utils.linear_to_lora_layers does after mx.random.seed (Apply). The
// layer itself is nn.LoRALinear.
package lora
