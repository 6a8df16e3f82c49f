"""Training from traces: read the trace store, write TRL DPO/GRPO datasets, run trainers, load
adapters back into the pool.

Modules (import them directly; all but :mod:`~agora.training.datasets`, :mod:`~agora.training.own_samples`,
:mod:`~agora.training.verified` and :mod:`~agora.training.aggregator` need the ``train`` extra)::

    convert    export_hf(name_or_gguf) -> HF folder of an embedded GGUF model (cached)
    datasets   load_preference_pairs, align_pairs, load_duels, dpo_rows, grpo_rows_from_duels,
               grpo_rows_from_problems, PairFilter, split_by_instruction, export_jsonl/parquet, to_dataset
    rewards    correctness_reward, stored_judge_reward, PeerJudgeReward, minmax_per_group
    config     LoraSettings, DPOSettings, GRPOSettings, SFTSettings
    trainers   train_dpo, train_grpo, train_sft, check_train_extra, preference_accuracy
    resume     resume_point, run_fingerprint, is_main_process (resuming an interrupted training)
    pool_entries  trained_entry, spec_entry, write_pool_file (a trained adapter as a pool entry)
    pipeline   dpo_member, grpo_member, sft_member (one pool member trained and recorded in the trace DB)
    evolve     EvolveConfig, evolve (the Stackelberg loop)
    tables     the training_datasets and checkpoints tables
    align_pairs  AlignPairConfig, align_target_pairs, solved_questions (DPO pairs for one model from ALIGN)
    own_samples  VerifiedConfig, HeldOut, own_samples, scored_samples, duel_samples (a member's own scored
                 samples from any recorded run)
    verified     own_pairs, sft_rows, verified_stats (SFT rows and right-over-wrong pairs from them)
    aggregator   AggregatorDataConfig, candidate_sets, aggregator_prompt, aggregator_rows, aggregation_reward
    evaluation   greedy_outcomes, paired_difference, proportion_ci, mean_ci
    phases       PhaseBook (resumable, costed phases of a long experiment)
"""
