// Package lora puts mlx_lm's LoRA adapters on a MiniCPM5 (Llama) model
// and reads and writes them as mlx_lm does:
//
//   - [Apply] (and [ApplyDoRA], use_dora) is
//     tuner.utils.linear_to_lora_layers after mx.random.seed: the same
//     projections of the same blocks, in the same order, with the same
//     initial values (generate.RNG replays MLX's key sequence);
//   - [Dropout] is mlx.nn.Dropout in training mode for nn.LoRALinear,
//     drawing MLX's masks from the same key sequence;
//   - [Save] and [Load] write and read an adapter directory
//     (adapters.safetensors, adapter_config.json) in mlx_lm's format, as
//     mlx_lm.lora writes it and tuner.utils.load_adapters reads it.
//
// The layers themselves are nn.LoRALinear and nn.DoRALinear. "full"
// fine-tuning and adapters on modules outside the blocks (config keys
// such as lm_head) are not implemented: they are refused with an error
// naming them.
package lora
